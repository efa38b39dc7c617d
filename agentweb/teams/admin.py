from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from agentweb.teams import actions
from agentweb.teams.models import Team


class TeamForm(forms.ModelForm):
    queues_text = forms.CharField(
        label="Queues",
        required=False,
        help_text="Comma-separated ticket queues this team owns.",
    )

    class Meta:
        model = Team
        fields = ["name", "members", "daily_cost_usd"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["queues_text"].initial = ", ".join(self.instance.queues)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data["queues"] = actions.clean_queues((data.get("queues_text") or "").split(","))
            actions.clean_name(data.get("name") or "")
        except actions.TeamError as exc:
            field, _, message = str(exc).partition(": ")
            self.add_error("queues_text" if field == "queues" else "name", message)
        return data


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Saves go through ``teams.actions.do_save_team`` (checks and the audit line)."""

    form = TeamForm
    list_display = ("name", "queue_list", "member_count", "daily_cost_usd")
    filter_horizontal = ("members",)
    search_fields = ("name",)

    @admin.display(description="queues")
    def queue_list(self, team: Team) -> str:
        return ", ".join(team.queues)

    @admin.display(description="members")
    def member_count(self, team: Team) -> int:
        return team.members.count()

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        actor = request.user if request.user.is_authenticated else None
        saved = actions.do_save_team(
            Team.objects.get(pk=obj.pk) if change else None,
            actor=actor,
            name=form.cleaned_data["name"],
            queues=form.cleaned_data["queues"],
            members=form.cleaned_data["members"],
            daily_cost_usd=form.cleaned_data.get("daily_cost_usd"),
        )
        form.instance = saved
        obj.pk = saved.pk  # for the admin's own log line and links

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # The members were saved with the team (do_save_team); only inlines are left.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request: HttpRequest, obj: Team) -> None:
        actor = request.user if request.user.is_authenticated else None
        actions.do_delete_team(obj, actor=actor)
