"""Deterministic demo data for the shop: ``seed_shop()``.

Everything is generated from a fixed seed and a fixed base date, so two installations
get the same customers, orders and tickets. Seeding is idempotent: rows are keyed by
their natural ids (customer code, order number, SKU, KB slug, ticket customer+subject)
and only missing ones are created, in one transaction.

The first 25 customers and orders A1001 to A1025 are hand-written so that the open tickets
tell the stories the demo model plays (see ``tools.ticket.demo``); the rest is
generated.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import transaction

from agentweb.tickets.models import DEMO_SOURCE, Message, Ticket

from .kb_data import KB_ARTICLES
from .models import (
    Customer,
    CustomerFact,
    CustomerNote,
    InventoryItem,
    KBArticle,
    Order,
    OrderItem,
    Payment,
    Refund,
    Shipment,
    ShipmentEvent,
)

SEED = 20261123
BASE = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
CUSTOMERS = 60
RANDOM_ORDERS = 230
FREE_SHIPPING_FROM = Decimal("50.00")
STANDARD_SHIPPING = Decimal("5.99")

CATALOG: list[tuple[str, str, str]] = [
    ("KIT-0101", "Stoneware Teapot 1.2L", "38.00"),
    ("KIT-0102", "Ceramic Mug, Speckled", "14.50"),
    ("KIT-0103", "Cast Iron Skillet 26cm", "42.00"),
    ("KIT-0104", "Chef's Knife 20cm", "89.00"),
    ("KIT-0105", "High-Speed Blender 1200W", "129.00"),
    ("KIT-0106", "Bamboo Cutting Board", "24.00"),
    ("KIT-0107", "Pour-Over Coffee Set", "46.00"),
    ("KIT-0108", "Glass Storage Jars (set of 4)", "29.00"),
    ("KIT-0109", "Electric Kettle, Matte Black", "59.00"),
    ("KIT-0110", "Linen Tea Towels (set of 3)", "18.00"),
    ("HOM-0201", "Wool Throw Blanket", "79.00"),
    ("HOM-0202", "Linen Duvet Cover, Queen", "129.00"),
    ("HOM-0203", "Scented Candle, Cedar", "22.00"),
    ("HOM-0204", "Ceramic Table Lamp", "96.00"),
    ("HOM-0205", "Cotton Bath Towel Set", "54.00"),
    ("HOM-0206", "Woven Storage Basket", "34.00"),
    ("HOM-0207", "Wall Clock, Oak", "48.00"),
    ("OUT-0301", "Insulated Water Bottle 750ml", "32.00"),
    ("OUT-0302", "Camping Lantern, Rechargeable", "45.00"),
    ("OUT-0303", "Trail Backpack 28L", "118.00"),
    ("OUT-0304", "Folding Camp Chair", "64.00"),
    ("OUT-0305", "Down Sleeping Bag, 3-Season", "189.00"),
    ("OUT-0306", "Enamel Camp Mug", "16.00"),
    ("ELC-0401", "Wireless Earbuds", "99.00"),
    ("ELC-0402", "Bluetooth Speaker, Compact", "69.00"),
    ("ELC-0403", "USB-C Charger 65W", "39.00"),
    ("ELC-0404", "Smart Plug (2-pack)", "29.00"),
    ("ELC-0405", "E-Reader Sleeve", "24.00"),
    ("ELC-0406", "Desk Lamp with Wireless Charger", "84.00"),
    ("APP-0501", "Merino Wool Socks (3 pairs)", "36.00"),
    ("APP-0502", "Rain Jacket, Packable", "149.00"),
    ("APP-0503", "Knit Beanie", "28.00"),
    ("APP-0504", "Leather Gloves", "68.00"),
    ("APP-0505", "Canvas Tote Bag", "19.00"),
    ("TEA-0601", "Sencha Green Tea 100g", "16.00"),
    ("TEA-0602", "Earl Grey Loose Leaf 100g", "14.00"),
    ("TEA-0603", "Tea Sampler Box (12 teas)", "42.00"),
    ("TEA-0604", "Matcha Starter Kit", "58.00"),
    ("TEA-0605", "Chamomile Blend 80g", "12.00"),
    ("TEA-0606", "Cast Iron Tea Kettle", "74.00"),
]
PRICES = {sku: Decimal(price) for sku, _, price in CATALOG}
NAMES = {sku: name for sku, name, _ in CATALOG}

#: (sku, on_hand, reserved, days until restock) for items that are short; others are stocked.
SHORT_STOCK: dict[str, tuple[int, int, int | None]] = {
    "OUT-0305": (0, 0, 18),
    "ELC-0401": (0, 0, 9),
    "HOM-0202": (3, 3, 12),
    "KIT-0105": (2, 0, None),
    "TEA-0604": (14, 2, None),
}

FIRST = [
    "Emma", "Liam", "Olivia", "Noah", "Ava", "Ethan", "Sophia", "Mason", "Isabella", "Lucas",
    "Mia", "Oliver", "Amelia", "Elijah", "Harper", "James", "Evelyn", "Benjamin", "Abigail",
    "Henry", "Ella", "Daniel", "Grace", "Samuel", "Chloe", "David", "Nora", "Joseph", "Lily",
    "Carter", "Zoe", "Owen", "Hannah", "Wyatt", "Layla", "Julian", "Aria", "Levi", "Riley",
    "Isaac", "Maya", "Gabriel", "Leah", "Anthony", "Stella", "Dylan", "Hazel", "Leo", "Aurora",
    "Aaron", "Naomi", "Thomas", "Ruby", "Charles", "Alice", "Miles", "Clara", "Adrian", "Iris",
    "Felix",
]  # fmt: skip
LAST = [
    "Johnson", "Martinez", "Nguyen", "Patel", "Kim", "Garcia", "Okafor", "Schmidt", "Rossi",
    "Dubois", "Kowalski", "Andersen", "Tanaka", "Silva", "O'Brien", "Haddad", "Novak",
    "Fischer", "Moreau", "Larsen", "Chen", "Walker", "Reyes", "Bianchi", "Murphy", "Cohen",
    "Yamamoto", "Hughes", "Alvarez", "Brennan", "Costa", "Lindqvist", "Mensah", "Fraser",
    "Petrov", "Santos", "Weber", "Ito", "Byrne", "Castillo", "Dalton", "Ferreira", "Gallo",
    "Hartmann", "Jensen", "Keller", "Lambert", "Morgan", "Nilsen", "Ortega", "Price", "Quinn",
    "Russo", "Sato", "Turner", "Ueda", "Vargas", "Wright", "Young", "Zimmer",
]  # fmt: skip
STREETS = [
    "Maple Avenue", "Oak Street", "Cedar Lane", "Pine Road", "Elm Street", "Lakeview Drive",
    "Hillcrest Road", "Sunset Boulevard", "River Road", "Park Avenue", "Washington Street",
    "Highland Avenue", "Meadow Lane", "Chestnut Street", "Spring Street",
]  # fmt: skip
CITIES = [
    ("Portland", "OR", "972"), ("Seattle", "WA", "981"), ("Denver", "CO", "802"),
    ("Austin", "TX", "787"), ("Chicago", "IL", "606"), ("Boston", "MA", "021"),
    ("Atlanta", "GA", "303"), ("Minneapolis", "MN", "554"), ("Phoenix", "AZ", "850"),
    ("Brooklyn", "NY", "112"), ("Madison", "WI", "537"), ("Raleigh", "NC", "276"),
    ("San Diego", "CA", "921"), ("Columbus", "OH", "432"), ("Nashville", "TN", "372"),
]  # fmt: skip
HUBS = {
    "UPS": ["Louisville, KY", "Hodgkins, IL", "Ontario, CA", "Dallas, TX"],
    "FedEx": ["Memphis, TN", "Indianapolis, IN", "Oakland, CA", "Newark, NJ"],
    "USPS": ["Kansas City, MO", "Denver, CO", "Philadelphia, PA", "Atlanta, GA"],
}


@dataclass
class _OrderPlan:
    number: str
    customer: str
    status: str
    placed_at: datetime
    items: list[tuple[str, int]]
    payments: int = 1
    shipping: str | None = None
    carrier: str | None = None
    shipment_status: str | None = None
    shipped_days: float = 1.0
    transit_days: float = 3.0
    refunds: list[tuple[str, str]] = field(default_factory=list)
    cancelled: bool = False


@dataclass
class _Plan:
    customers: list[Customer] = field(default_factory=list)
    orders: list[_OrderPlan] = field(default_factory=list)
    notes: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    facts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    tickets: list[tuple[str, str | None, str, str, str, float]] = field(default_factory=list)


def _days(n: float) -> timedelta:
    return timedelta(days=n)


def _address(rng: random.Random) -> str:
    city, state, zip3 = rng.choice(CITIES)
    street = f"{rng.randint(2, 4999)} {rng.choice(STREETS)}"
    unit = f", Apt {rng.randint(1, 40)}" if rng.random() < 0.3 else ""
    return f"{street}{unit}, {city}, {state} {zip3}{rng.randint(0, 99):02d}, USA"


def _tracking(rng: random.Random, carrier: str) -> str:
    alnum = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"
    digits = "0123456789"
    if carrier == "UPS":
        return (
            "1Z"
            + "".join(rng.choice(alnum) for _ in range(6))
            + "03"
            + "".join(rng.choice(digits) for _ in range(8))
        )
    if carrier == "FedEx":
        return "".join(rng.choice(digits) for _ in range(12))
    return "9400" + "".join(rng.choice(digits) for _ in range(18))


# --- the plan ------------------------------------------------------------------------


def _customers(rng: random.Random) -> list[Customer]:
    firsts = FIRST[:]
    lasts = LAST[:]
    rng.shuffle(firsts)
    rng.shuffle(lasts)
    out = []
    for i in range(CUSTOMERS):
        first, last = firsts[i], lasts[i]
        handle = f"{first}.{last}".lower().replace("'", "")
        out.append(
            Customer(
                code=f"C{i + 1:03d}",
                name=f"{first} {last}",
                email=f"{handle}@example.{rng.choice(['com', 'net', 'org'])}",
                phone=f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
                tier=rng.choices(["standard", "gold", "vip"], weights=[7, 2, 1])[0],
                address=_address(rng),
                created_at=BASE - _days(rng.randint(60, 1400)),
            )
        )
    # Two tiers the stories rely on.
    out[19].tier = "vip"
    out[18].tier = "gold"
    return out


def _scenario_orders() -> list[_OrderPlan]:
    """The orders the open tickets are about (A1001 to A1026)."""
    b = BASE
    d = _days
    return [
        # delivered but not received
        _OrderPlan("A1001", "C001", "delivered", b - d(6), [("KIT-0109", 1), ("TEA-0602", 2)],
                   carrier="UPS", shipment_status="delivered", transit_days=2),
        _OrderPlan("A1002", "C002", "delivered", b - d(5), [("ELC-0402", 1)],
                   carrier="FedEx", shipment_status="delivered", transit_days=3),
        # where is my order: in transit / stuck with an exception
        _OrderPlan("A1003", "C003", "shipped", b - d(7), [("HOM-0205", 1), ("HOM-0203", 2)],
                   carrier="USPS", shipment_status="in_transit", shipped_days=2, transit_days=7),
        _OrderPlan("A1004", "C004", "shipped", b - d(9), [("OUT-0303", 1)],
                   carrier="UPS", shipment_status="exception", transit_days=6),
        # damaged on arrival (38.00 with approval, 14.50 without, 129.00 with)
        _OrderPlan("A1005", "C005", "delivered", b - d(8), [("KIT-0101", 1), ("TEA-0601", 1)],
                   carrier="UPS", shipment_status="delivered", transit_days=3),
        _OrderPlan("A1006", "C006", "delivered", b - d(7), [("KIT-0102", 2), ("KIT-0110", 1)],
                   carrier="USPS", shipment_status="delivered", transit_days=4),
        _OrderPlan("A1007", "C007", "delivered", b - d(10), [("KIT-0105", 1)],
                   carrier="FedEx", shipment_status="delivered", transit_days=2),
        # cancellations: paid, pending payment, already shipped
        _OrderPlan("A1008", "C008", "paid", b - d(0.6), [("APP-0502", 1)]),
        _OrderPlan("A1009", "C009", "pending", b - d(0.3), [("HOM-0204", 1)], payments=0),
        _OrderPlan("A1010", "C010", "shipped", b - d(3), [("OUT-0304", 2)],
                   carrier="UPS", shipment_status="in_transit", transit_days=4),
        # address changes: two before shipping, one after
        _OrderPlan("A1011", "C011", "paid", b - d(0.5), [("KIT-0103", 1), ("KIT-0106", 1)]),
        _OrderPlan("A1012", "C012", "paid", b - d(0.4), [("ELC-0406", 1)]),
        _OrderPlan("A1013", "C013", "shipped", b - d(2), [("APP-0501", 2), ("APP-0503", 1)],
                   carrier="UPS", shipment_status="in_transit", transit_days=4),
        # duplicate charge: a real one (two captures) and a pending authorization
        _OrderPlan("A1017", "C017", "delivered", b - d(12), [("KIT-0107", 1), ("TEA-0603", 1)],
                   payments=2, carrier="UPS", shipment_status="delivered", transit_days=3),
        _OrderPlan("A1018", "C018", "shipped", b - d(2), [("ELC-0403", 1), ("ELC-0404", 1)],
                   carrier="FedEx", shipment_status="in_transit", transit_days=3),
        # angry repeat contacts
        _OrderPlan("A1019", "C019", "shipped", b - d(16), [("HOM-0201", 1), ("HOM-0206", 1)],
                   carrier="UPS", shipment_status="exception", transit_days=5),
        _OrderPlan("A1020", "C020", "shipped", b - d(11), [("ELC-0402", 1), ("ELC-0403", 1)],
                   carrier="FedEx", shipment_status="in_transit", transit_days=3),
        # refunds beyond the 30-day return policy
        _OrderPlan("A1021", "C021", "delivered", b - d(78), [("APP-0502", 1)],
                   carrier="UPS", shipment_status="delivered", transit_days=3),
        _OrderPlan("A1022", "C022", "delivered", b - d(124), [("HOM-0201", 1)],
                   carrier="USPS", shipment_status="delivered", transit_days=4),
        # general questions
        _OrderPlan("A1024", "C024", "delivered", b - d(20), [("KIT-0104", 1), ("KIT-0106", 1)],
                   carrier="FedEx", shipment_status="delivered", transit_days=2),
        # late and charged twice: the coordinator hands each part to a specialist
        _OrderPlan("A1026", "C026", "shipped", b - d(10), [("KIT-0104", 1)], payments=2,
                   carrier="UPS", shipment_status="in_transit", shipped_days=1, transit_days=4),
        # history: an earlier not-received claim of C002, refunded
        _OrderPlan("A1025", "C002", "delivered", b - d(150), [("ELC-0401", 1)],
                   carrier="UPS", shipment_status="delivered", transit_days=3,
                   refunds=[("99.00", "Parcel marked delivered but not received; carrier "
                             "trace found nothing.")]),
    ]  # fmt: skip


def _random_orders(rng: random.Random, customers: list[Customer]) -> list[_OrderPlan]:
    skus = [sku for sku, _, _ in CATALOG]
    out = []
    for i in range(RANDOM_ORDERS):
        number = f"A{1031 + i}"
        customer = rng.choice(customers).code
        age = round(rng.uniform(0.2, 180), 2)
        items = [(sku, rng.choice([1, 1, 1, 2, 3])) for sku in rng.sample(skus, rng.randint(1, 4))]
        roll = rng.random()
        if age > 14:
            status = "cancelled" if roll < 0.05 else "delivered"
        elif age > 5:
            status = "delivered" if roll < 0.6 else "shipped"
        elif age > 1.5:
            status = "shipped" if roll < 0.7 else "paid"
        else:
            status = "paid" if roll < 0.85 else "pending"
        plan = _OrderPlan(number, customer, status, BASE - _days(age), items)
        if status in ("shipped", "delivered"):
            plan.carrier = rng.choices(["UPS", "FedEx", "USPS"], weights=[5, 3, 2])[0]
            plan.transit_days = rng.choice([2, 3, 3, 4, 5])
            plan.shipment_status = (
                "delivered" if status == "delivered" else rng.choice(["in_transit", "in_transit"])
            )
            if status == "shipped" and age < plan.transit_days:
                plan.transit_days = age  # estimated, still on its way
        if status == "pending":
            plan.payments = 0
        if status == "cancelled":
            plan.cancelled = True
        if status == "delivered" and rng.random() < 0.06:
            reason = rng.choice(
                [
                    "Goodwill credit for a late delivery.",
                    "Price adjustment within 14 days.",
                    "Returned unused item.",
                ]
            )
            plan.refunds.append(("10.00" if "late" in reason else "15.00", reason))
        out.append(plan)
    return out


def _notes_and_facts(plan: _Plan) -> None:
    plan.notes = {
        "C002": [
            (150, "Sofia (support)", "A1025 marked delivered by UPS but not received. Trace "
             "opened, nothing found; refunded 99.00 in full."),
        ],
        "C019": [
            (12, "Maria (support)", "Customer called: A1019 has not moved since the UPS hub "
             "scan. Told her to give it 48 hours."),
            (7, "Jon (support)", "Second contact about A1019. UPS shows an exception "
             "(address label damaged). Promised a callback within a day."),
            (3, "Maria (support)", "Customer emailed again, upset that nobody called back. "
             "Asked for a supervisor. Callback still not logged."),
        ],
        "C020": [
            (9, "Jon (support)", "VIP customer. A1020 was promised free express shipping "
             "(ETA two days) as an apology for an earlier delay."),
            (4, "Sofia (support)", "Customer asked where A1020 is; FedEx shows it moving. "
             "Told him it would arrive by the weekend."),
        ],
        "C001": [(300, "Jon (support)", "Long-time customer; no earlier claims.")],
        "C021": [(40, "Maria (support)", "Asked for the sizing guide of the rain jacket.")],
    }  # fmt: skip
    plan.facts = {
        "C019": [("preferred_contact", "email only; do not call (asked twice)")],
        "C020": [("tier_perk", "free express shipping promised on A1020")],
        "C002": [("previous_claims", "one missing-parcel claim (A1025), refunded")],
    }


def _tickets(plan: _Plan) -> None:
    """(customer, order, subject, body, status, days before BASE)."""
    plan.tickets = [
        ("C001", "A1001", "Package marked delivered but I never got it",
         "Hi, my order A1001 shows as delivered on Friday but there is nothing at my door. "
         "I checked with my neighbours and the mail room. Can you help?\n\nThanks, {first}",
         "open", 0.2),
        ("C002", "A1002", "Tracking says delivered, nothing here",
         "The tracking for order A1002 says delivered yesterday, but I never received it. "
         "Was it left somewhere else?", "open", 0.3),
        ("C003", "A1003", "Where is my order?",
         "Where is my order A1003? It has been a week and I'm still waiting. I need the "
         "towels for guests arriving on Saturday.", "open", 0.4),
        ("C004", "A1004", "Order is late, tracking has not moved",
         "My order A1004 is late and the tracking hasn't moved in four days. When will it "
         "arrive?", "open", 0.5),
        ("C005", "A1005", "Teapot arrived cracked",
         "The stoneware teapot from order A1005 arrived cracked, the lid is in pieces. "
         "Could I get a refund for it? The tea was fine.", "open", 0.6),
        ("C006", "A1006", "One mug broken",
         "One of the ceramic mugs in order A1006 arrived broken. The other one and the "
         "towels are fine.", "open", 0.7),
        ("C007", "A1007", "Blender damaged in shipping",
         "My blender from order A1007 arrived with a dented jar and it leaks when I use it. "
         "I'd like my money back for it.", "open", 0.8),
        ("C008", "A1008", "Please cancel my order",
         "Please cancel my order A1008, I ordered the wrong size by mistake.", "open", 0.1),
        ("C009", "A1009", "Cancel order",
         "I'd like to cancel order A1009. I found the lamp cheaper locally, sorry!", "open",
         0.15),
        ("C010", "A1010", "Cancel A1010",
         "Cancel order A1010 please, I no longer need the chairs.", "open", 0.25),
        ("C011", "A1011", "New address for my order",
         "I just moved! Please ship order A1011 to my new address: 48 Harbor Street, Apt 3, "
         "Portland, OR 97201, USA", "open", 0.05),
        ("C012", "A1012", "Wrong shipping address on A1012",
         "I typed my old apartment on order A1012. New address: 2150 Mission Street, Unit 5, "
         "San Francisco, CA 94110, USA", "open", 0.12),
        ("C013", "A1013", "Change the shipping address",
         "Can you change the shipping address on A1013? I'm staying with my parents this "
         "week. New address: 77 Elm Road, Austin, TX 78701, USA", "open", 0.35),
        ("C014", None, "Sleeping bag back in stock?",
         "Is the Down Sleeping Bag (OUT-0305) back in stock? I want it for a trip next "
         "month.", "open", 0.9),
        ("C015", None, "Wireless earbuds sold out",
         "When will the wireless earbuds ELC-0401 be available again? They have been sold "
         "out for weeks.", "open", 1.1),
        ("C016", None, "Matcha kits in stock?",
         "Do you have the Matcha Starter Kit TEA-0604 in stock? I would like two as "
         "gifts.", "open", 1.3),
        ("C017", "A1017", "Charged twice",
         "I was charged twice for order A1017: two identical charges on my card statement. "
         "Please fix this.", "open", 1.0),
        ("C018", "A1018", "Duplicate charge on my card",
         "My bank app shows a duplicate charge for order A1018. Why was I billed twice?",
         "open", 0.45),
        ("C019", "A1019", "THIRD time writing about my order",
         "This is the THIRD time I'm writing about order A1019. Still no package and nobody "
         "called me back as promised. Absolutely unacceptable!", "open", 0.3),
        ("C020", "A1020", "Worst service ever",
         "Your service is the worst. I was promised A1020 would arrive last week with "
         "express shipping. I'm fed up with waiting.", "open", 0.2),
        ("C021", "A1021", "Refund for rain jacket",
         "I bought the rain jacket (order A1021) a couple of months ago and used it a few "
         "times, but I don't like it. I want a full refund.", "open", 1.5),
        ("C022", "A1022", "Money back for the throw",
         "I've changed my mind about the wool throw from order A1022 and would like my money "
         "back. I've had it for a few months.", "open", 1.7),
        ("C026", "A1026", "Late parcel, and I was charged twice",
         "My order A1026 is late: it should have arrived last week and the tracking has not "
         "moved since. On top of that I was charged twice for it on my card. Please sort out "
         "both.", "open", 0.08),
        ("C023", None, "Do you ship to Canada?",
         "Hi! Do you ship to Canada, and how long does it take? I'm in Toronto.", "open",
         2.0),
        ("C024", "A1024", "Invoice for my order",
         "Could you send me an invoice for order A1024 for my company's expense report?",
         "open", 2.2),
        ("C025", None, "Password reset email",
         "How do I reset my password? I clicked the link but the email is not in my inbox.",
         "open", 2.5),
        # history
        ("C030", None, "Gift wrapping?", "Do you offer gift wrapping?", "closed", 30),
        ("C031", None, "Discount code not working",
         "The code WELCOME10 says it has expired.", "closed", 24),
        ("C032", None, "Size of the beanie", "Is the knit beanie one size?", "closed", 19),
        ("C033", None, "Thanks!", "Just wanted to say the kettle is lovely.", "closed", 15),
        ("C040", None, "Change email address",
         "Please change my email address to my work one.", "pending", 3),
        ("C041", None, "Bulk order for the office",
         "We would like 40 mugs for our office. Is there a discount?", "pending", 4),
    ]  # fmt: skip


def build_plan() -> _Plan:
    rng = random.Random(SEED)
    plan = _Plan()
    plan.customers = _customers(rng)
    plan.orders = _scenario_orders() + _random_orders(rng, plan.customers)
    _notes_and_facts(plan)
    _tickets(plan)
    return plan


# --- writing it ----------------------------------------------------------------------


def _money(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"))


def _shipment_rows(
    rng: random.Random, plan: _OrderPlan, order: Order, used: set[str]
) -> tuple[Shipment, list[ShipmentEvent]]:
    carrier = plan.carrier or "UPS"
    number = _tracking(rng, carrier)
    while number in used:
        number = _tracking(rng, carrier)
    used.add(number)
    shipped = plan.placed_at + _days(plan.shipped_days)
    eta = shipped + _days(plan.transit_days)
    status = plan.shipment_status or "in_transit"
    hub, hub2 = rng.sample(HUBS.get(carrier, HUBS["UPS"]), 2)
    city = order.shipping_address.split(",")[-3].strip()
    events = [
        (shipped - _days(0.3), "label_created", "Warehouse, Reno, NV", "Shipping label created"),
        (shipped, "in_transit", "Reno, NV", f"Picked up by {carrier}"),
        (shipped + _days(0.6), "in_transit", hub, "Arrived at hub"),
        (shipped + _days(1.2), "in_transit", hub2, "Departed facility"),
    ]
    delivered_at = None
    if status == "delivered":
        delivered_at = eta
        events += [
            (eta - _days(0.3), "out_for_delivery", city, "Out for delivery"),
            (eta, "delivered", city, rng.choice(["Delivered, left at front door",
                                                 "Delivered, left in mail room",
                                                 "Delivered, handed to resident"])),
        ]  # fmt: skip
    elif status == "exception":
        events.append(
            (shipped + _days(2), "exception", hub2, "Exception: address label damaged, "
             "held at facility")
        )  # fmt: skip
    events = [e for e in events if e[0] <= BASE]
    shipment = Shipment(
        order=order,
        carrier=carrier,
        tracking_number=number,
        status=status,
        shipped_at=shipped,
        estimated_delivery=eta.date(),
        delivered_at=delivered_at,
    )
    rows = [
        ShipmentEvent(shipment=shipment, at=at, status=st, location=loc, description=desc)
        for at, st, loc, desc in events
    ]
    return shipment, rows


_Children = tuple[_OrderPlan, Order, list[str], tuple[Shipment, list[ShipmentEvent]] | None]


def _write_orders(
    rng: random.Random, plans: list[_OrderPlan], customers: dict[str, Customer]
) -> None:
    existing = set(Order.objects.values_list("number", flat=True))
    # A database seeded by an older plan may already hold the numbers this plan draws for
    # a new order: those are drawn again, so re-seeding never trips a unique constraint.
    used_tracking: set[str] = set(Shipment.objects.values_list("tracking_number", flat=True))
    taken_refs = set(Payment.objects.values_list("reference", flat=True))
    new_orders: list[Order] = []
    children: list[_Children] = []
    for plan in plans:
        subtotal = _money(sum((PRICES[s] * q for s, q in plan.items), Decimal("0")))
        shipping = Decimal("0.00") if subtotal >= FREE_SHIPPING_FROM else STANDARD_SHIPPING
        total = subtotal + shipping
        customer = customers[plan.customer]
        order = Order(
            number=plan.number,
            customer=customer,
            status=plan.status,
            subtotal=subtotal,
            shipping_cost=shipping,
            total=total,
            captured_amount=_money(total * plan.payments),
            payment_method=rng.choice(["card", "card", "card", "paypal"]),
            shipping_address=customer.address,
            placed_at=plan.placed_at,
            cancelled_at=plan.placed_at + _days(0.2) if plan.cancelled else None,
            cancel_reason="Customer request" if plan.cancelled else "",
        )
        # Draw the same random numbers whether or not the order exists (determinism).
        refs = [f"ch_{rng.getrandbits(56):014x}" for _ in range(plan.payments)]
        shipment = None
        if plan.carrier:
            shipment = _shipment_rows(rng, plan, order, used_tracking)
        if plan.number in existing:
            continue
        for n, ref in enumerate(refs):
            while ref in taken_refs:
                ref = f"ch_{rng.getrandbits(56):014x}"
            taken_refs.add(ref)
            refs[n] = ref
        new_orders.append(order)
        children.append((plan, order, refs, shipment))
    Order.objects.bulk_create(new_orders)
    items: list[OrderItem] = []
    payments: list[Payment] = []
    shipments: list[Shipment] = []
    events: list[ShipmentEvent] = []
    refunds: list[Refund] = []
    for plan, order, refs, shipment in children:
        items += [
            OrderItem(order=order, sku=s, name=NAMES[s], quantity=q, unit_price=PRICES[s])
            for s, q in plan.items
        ]
        payments += [
            Payment(
                order=order,
                reference=ref,
                amount=order.total,
                method=order.payment_method,
                captured_at=plan.placed_at + _days(0.01 + 0.02 * n),
            )
            for n, ref in enumerate(refs)
        ]
        if shipment is not None:
            shipments.append(shipment[0])
            events += shipment[1]
        total_refunded = Decimal("0")
        for n, (amount, reason) in enumerate(plan.refunds):
            refunds.append(
                Refund(
                    order=order,
                    amount=Decimal(amount),
                    reason=reason,
                    idempotency_key=f"seed:{order.number}:{n}",
                    created_at=plan.placed_at + _days(plan.transit_days + 4),
                )
            )
            total_refunded += Decimal(amount)
        if plan.cancelled and order.captured_amount > total_refunded:
            refunds.append(
                Refund(
                    order=order,
                    amount=order.captured_amount - total_refunded,
                    reason="Order cancelled: Customer request",
                    idempotency_key=f"seed:{order.number}:cancel",
                    created_at=order.cancelled_at or plan.placed_at,
                )
            )
    OrderItem.objects.bulk_create(items)
    Payment.objects.bulk_create(payments)
    for s in shipments:
        s.order_id = s.order.pk
    Shipment.objects.bulk_create(shipments)
    for e in events:
        e.shipment_id = e.shipment.pk
    ShipmentEvent.objects.bulk_create(events)
    Refund.objects.bulk_create(refunds)


def _write_inventory() -> None:
    existing = set(InventoryItem.objects.values_list("sku", flat=True))
    rows = []
    for n, (sku, name, price) in enumerate(CATALOG):
        if sku in existing:
            continue
        on_hand, reserved, restock = SHORT_STOCK.get(sku, (20 + (n * 37) % 180, n % 5, None))
        rows.append(
            InventoryItem(
                sku=sku,
                name=name,
                price=Decimal(price),
                on_hand=on_hand,
                reserved=reserved,
                restock_date=(BASE + _days(restock)).date() if restock is not None else None,
            )
        )
    InventoryItem.objects.bulk_create(rows)


def _write_kb() -> None:
    existing = set(KBArticle.objects.values_list("slug", flat=True))
    KBArticle.objects.bulk_create(
        KBArticle(
            slug=slug,
            category=category,
            title=title,
            body=body,
            updated_at=BASE - _days(30 + n * 7),
        )
        for n, (slug, category, title, body) in enumerate(KB_ARTICLES)
        if slug not in existing
    )


def _write_tickets(plan: _Plan, customers: dict[str, Customer]) -> None:
    """The demo tickets (source ``demo``), keyed by customer and subject; their ``fields``
    name the shop's customer and order."""
    existing = set(
        Ticket.objects.filter(source=DEMO_SOURCE).values_list("fields__customer_id", "subject")
    )
    for code, number, subject, body, status, age in plan.tickets:
        if (code, subject) in existing:
            continue
        customer = customers[code]
        at = BASE - _days(age)
        fields = {"customer_id": code, **({"order_id": number} if number else {})}
        ticket = Ticket.objects.create(
            source=DEMO_SOURCE,
            subject=subject,
            requester_email=customer.email,
            requester_name=customer.name,
            status=status,
            fields=fields,
            created_at=at,
            updated_at=at,
        )
        Message.objects.create(
            ticket=ticket,
            direction=Message.Direction.IN,
            author=customer.name,
            body=body.format(first=customer.name.split()[0]),
            at=at,
        )


def seed_shop() -> dict[str, int]:
    """Create the demo shop's data (idempotent) and return the number of rows per kind."""
    plan = build_plan()
    rng = random.Random(SEED + 1)
    with transaction.atomic():
        existing = set(Customer.objects.values_list("code", flat=True))
        new_customers = [c for c in plan.customers if c.code not in existing]
        Customer.objects.bulk_create(new_customers)
        customers = {c.code: c for c in Customer.objects.all()}
        fresh = {c.code for c in new_customers}
        CustomerNote.objects.bulk_create(
            CustomerNote(
                customer=customers[code], body=body, author=who, created_at=BASE - _days(n)
            )
            for code, rows in plan.notes.items()
            if code in fresh
            for n, who, body in rows
        )
        CustomerFact.objects.bulk_create(
            CustomerFact(
                customer=customers[code],
                key=key,
                value=value,
                source_run="seed",
                updated_at=BASE - _days(2),
            )
            for code, rows in plan.facts.items()
            if code in fresh
            for key, value in rows
        )
        _write_inventory()
        _write_kb()
        _write_orders(rng, plan.orders, customers)
        _write_tickets(plan, customers)
    return {
        "customers": Customer.objects.count(),
        "orders": Order.objects.count(),
        "shipments": Shipment.objects.count(),
        "refunds": Refund.objects.count(),
        "inventory_items": InventoryItem.objects.count(),
        "kb_articles": KBArticle.objects.count(),
        "tickets": Ticket.objects.filter(source=DEMO_SOURCE).count(),
        "open_tickets": Ticket.objects.filter(
            source=DEMO_SOURCE, status=Ticket.Status.OPEN
        ).count(),
    }


def scenario_restock_date(sku: str) -> date | None:
    """The seeded restock date of ``sku`` (used by tests)."""
    entry = SHORT_STOCK.get(sku)
    if entry is None or entry[2] is None:
        return None
    return (BASE + _days(entry[2])).date()
