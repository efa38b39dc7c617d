"""LocalBackend reads a person's permissions (their own and their groups') in one
statement: the same set ModelBackend reads with its two queries."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentweb.accounts.backends import LocalBackend


@pytest.mark.django_db
def test_own_and_group_permissions_in_one_query_as_modelbackend_has_them() -> None:
    users = get_user_model().objects
    approvers = Group.objects.create(name="perm-test-approvers")
    approvers.permissions.add(*Permission.objects.filter(codename__startswith="change_")[:3])
    person = users.create_user("perm-test", password="pw-123456789")
    person.groups.add(approvers)
    person.user_permissions.add(Permission.objects.get(codename="add_group"))
    nobody = users.create_user("perm-test-nobody", password="pw-123456789")

    for user in (person, nobody):
        expected = ModelBackend().get_all_permissions(users.get(pk=user.pk))
        fresh = users.get(pk=user.pk)
        with CaptureQueriesContext(connection) as queries:
            got = LocalBackend().get_all_permissions(fresh)
            again = LocalBackend().get_all_permissions(fresh)  # cached on the user
        assert got == expected == again
        assert len(queries) == 1
    assert "auth.add_group" in LocalBackend().get_all_permissions(users.get(pk=person.pk))
    assert len(expected) == 0  # the last one: nobody has none

    inactive = users.get(pk=person.pk)
    inactive.is_active = False
    assert LocalBackend().get_all_permissions(inactive) == set()
