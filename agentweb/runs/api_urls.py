from django.urls import path

from agentweb.runs import api, api_suites, api_versions, openapi

urlpatterns = [
    path("openapi.json", openapi.openapi_json, name="api-openapi"),
    path("runs", api.runs, name="api-runs"),
    path("runs/<int:run_id>", api.run_detail, name="api-run"),
    path("runs/<int:run_id>/events", api.run_events, name="api-run-events"),
    path("runs/<int:run_id>/cancel", api.run_cancel, name="api-run-cancel"),
    path("runs/<int:run_id>/fork", api_versions.run_fork, name="api-run-fork"),
    path("suites", api_suites.suite_list, name="api-suites"),
    path(
        "suites/<str:name>/experiments", api_suites.suite_experiments, name="api-suite-experiments"
    ),
    path("experiments/<int:experiment_id>", api_suites.experiment_detail, name="api-experiment"),
    path("agents", api.agent_profiles, name="api-agents"),
    path("agents/<str:name>", api.agent_profile, name="api-agent"),
    path("agents/<str:name>/versions", api_versions.agent_versions, name="api-agent-versions"),
    path(
        "agents/<str:name>/versions/<int:n>", api_versions.agent_version, name="api-agent-version"
    ),
    path("approvals", api.approvals, name="api-approvals"),
    path("approvals/<int:approval_id>/decide", api.approval_decide, name="api-approval-decide"),
]
