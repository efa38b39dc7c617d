from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User

from agentweb.notify.models import SlackIdentity


class SlackIdentityInline(admin.StackedInline):
    """A user's Slack id: their clicks on approval buttons in Slack count as theirs."""

    model = SlackIdentity
    can_delete = True
    extra = 0
    max_num = 1
    verbose_name = "Slack identity"


class UserWithSlackAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, SlackIdentityInline]


admin.site.unregister(User)
admin.site.register(User, UserWithSlackAdmin)


@admin.register(SlackIdentity)
class SlackIdentityAdmin(admin.ModelAdmin):
    list_display = ("slack_id", "user")
    search_fields = ("slack_id", "user__username")
