"""The actions ask a worker to contact a server by the task's name (the tasks import the
actions, so the actions do not import the tasks): the name must be the task's."""

from agentweb.mcpservers import actions, tasks


def test_the_contact_is_sent_by_the_name_of_the_task():
    assert tasks.refresh_server.name == actions.REFRESH_SERVER
