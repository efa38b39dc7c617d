from django.urls import path

from agentweb.web import approvals, profile_versions, suite_pages, ticket_pages, views

app_name = "web"

urlpatterns = [
    path("", views.home, name="home"),
    path("tickets/", ticket_pages.tickets, name="tickets"),
    path("tickets/<int:ticket_id>/", ticket_pages.ticket_detail, name="ticket"),
    path("tickets/<int:ticket_id>/run/", ticket_pages.ticket_run, name="ticket_run"),
    path("runs/", views.runs, name="runs"),
    path("runs/new/", views.run_new, name="run_new"),
    path("runs/compare/", views.compare, name="compare"),
    path("suites/", suite_pages.suite_list, name="suites"),
    path("suites/add/", suite_pages.suite_add, name="suite_add"),
    path("experiments/compare/", suite_pages.experiment_compare, name="experiment_compare"),
    path("runs/import/", views.import_run, name="import"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/sent/<int:seq>/", views.model_call_sent, name="model_call_sent"),
    path("runs/<int:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/replay/", views.replay, name="replay"),
    path("runs/<int:run_id>/export.json", views.export, name="export"),
    path("runs/<int:run_id>/images/<str:ref>", views.run_image, name="run_image"),
    path("runs/<int:run_id>/files/<path:path>", views.run_file, name="run_file"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("approvals/<int:approval_id>/decide/", approvals.approval_decide, name="decide"),
    path("agents/", views.agents, name="agents"),
    path("agents/new/", views.agent_new, name="agent_new"),
    path("agents/<int:agent_id>/", views.agent_edit, name="agent_edit"),
    path("agents/<int:agent_id>/delete/", views.agent_delete, name="agent_delete"),
    path(
        "agents/<int:agent_id>/versions/<int:n>/restore/",
        profile_versions.restore,
        name="agent_restore",
    ),
]
