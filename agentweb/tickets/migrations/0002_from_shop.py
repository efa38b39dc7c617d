"""The demo shop's tickets become agentweb's own, keeping their ids (runs keep their
ticket): the customer and order go into ``fields`` (``customer_id``, ``order_id``), the
customer becomes the requester, the body the first incoming message, and the shop's
replies outgoing messages (a reply without a ticket gets a ticket of its own)."""

from django.db import migrations


def forwards(apps, schema_editor):
    ShopTicket = apps.get_model("shop", "Ticket")
    CustomerReply = apps.get_model("shop", "CustomerReply")
    Ticket = apps.get_model("tickets", "Ticket")
    Message = apps.get_model("tickets", "Message")
    for old in ShopTicket.objects.select_related("customer", "order").order_by("pk"):
        fields = {"customer_id": old.customer.code}
        if old.order_id is not None:
            fields["order_id"] = old.order.number
        ticket = Ticket.objects.create(
            id=old.pk,
            source="demo",
            subject=old.subject[:500],
            requester_email=old.customer.email,
            requester_name=old.customer.name,
            status=old.status,
            fields=fields,
            created_at=old.created_at,
            updated_at=old.created_at,
        )
        Message.objects.create(
            ticket=ticket,
            direction="in",
            author=old.customer.name,
            body=old.body,
            at=old.created_at,
        )
    with schema_editor.connection.cursor() as cursor:  # ids went in by hand: move the sequence on
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('tickets_ticket', 'id'), "
            "COALESCE((SELECT MAX(id) FROM tickets_ticket), 0) + 1, false)"
        )
    for reply in CustomerReply.objects.select_related("customer").order_by("pk"):
        ticket = None
        if reply.ticket_id is not None:
            ticket = Ticket.objects.filter(pk=reply.ticket_id).first()
        if ticket is None:
            ticket = Ticket.objects.create(
                source="api",
                subject=f"Message from the support team to {reply.customer.name}",
                requester_email=reply.customer.email,
                requester_name=reply.customer.name,
                status="pending",
                fields={"customer_id": reply.customer.code},
                created_at=reply.sent_at,
                updated_at=reply.sent_at,
            )
        Message.objects.create(
            ticket=ticket, direction="out", author="support", body=reply.message, at=reply.sent_at
        )
        if reply.sent_at > ticket.updated_at:
            Ticket.objects.filter(pk=ticket.pk).update(updated_at=reply.sent_at)


class Migration(migrations.Migration):
    dependencies = [
        ("tickets", "0001_initial"),
        ("shop", "0002_shop_domain"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
