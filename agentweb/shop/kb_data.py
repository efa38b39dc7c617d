"""Knowledge-base articles of the demo shop: (slug, category, title, body)."""

from __future__ import annotations

KB_ARTICLES: list[tuple[str, str, str, str]] = [
    (
        "return-policy",
        "Returns",
        "Return policy: 30 days, unused items",
        "You can return unused items in their original packaging within 30 days of delivery "
        "for a full refund to the original payment method. Items that have been used, worn or "
        "washed, and anything returned after 30 days, are not eligible for a refund; we can "
        "offer store credit at our discretion. Start a return from your account page; we email "
        "a prepaid return label.",
    ),
    (
        "refund-timelines",
        "Returns",
        "How long does a refund take?",
        "Refunds are issued to the original payment method. Card refunds appear on your "
        "statement within 3 to 5 business days, PayPal refunds within 24 hours. If you paid "
        "with a gift card the amount goes back to the card immediately.",
    ),
    (
        "damaged-items",
        "Returns",
        "Items that arrive damaged or broken",
        "If an item arrives damaged, cracked or broken, report it within 14 days of delivery. "
        "A photo helps but is not required for items under 50.00. We refund the damaged item "
        "in full or send a free replacement, whichever the customer prefers; there is no need "
        "to return broken glass or ceramics. Shipping costs for the replacement are on us.",
    ),
    (
        "wrong-item-received",
        "Returns",
        "Received the wrong item",
        "If we sent the wrong item we send the right one immediately by express shipping and "
        "email a prepaid label for the wrong one. The customer does not have to wait for the "
        "return to arrive before the replacement ships.",
    ),
    (
        "missing-item-in-package",
        "Returns",
        "An item is missing from the package",
        "Orders with several items sometimes ship in more than one parcel; check get_order for "
        "a second tracking number before treating an item as missing. If everything shipped "
        "in one parcel and an item is missing, we reship it or refund it.",
    ),
    (
        "exchanges",
        "Returns",
        "Exchanges for a different size or colour",
        "We do not swap items directly. Return the unused item within 30 days for a refund and "
        "place a new order for the size or colour you want; that way the new item ships right "
        "away instead of waiting for the return.",
    ),
    (
        "delivered-not-received",
        "Shipping",
        "Tracking says delivered but the parcel did not arrive",
        "Parcels marked delivered sometimes turn up within 48 hours: ask the customer to check "
        "with neighbours, the building's mail room and any safe place. If it is still missing, "
        "we open a trace with the carrier (escalate_to_carrier), which answers within 2 business "
        "days. If the carrier cannot locate it we reship the order or refund it in full. "
        "Customers with repeated missing-parcel claims are reviewed by a team lead.",
    ),
    (
        "lost-package-trace",
        "Shipping",
        "Lost or stuck parcels: carrier traces",
        "A parcel that has not moved for 4 days, or that shows a delivery exception, is traced "
        "with the carrier. The trace reference starts with ESC-. Do not open a second trace "
        "while one is open; follow up on the existing one instead.",
    ),
    (
        "delivery-times",
        "Shipping",
        "Delivery times and shipping rates",
        "Standard shipping takes 3 to 5 business days and costs 5.99; it is free for orders of "
        "50.00 or more. Express shipping takes 1 to 2 business days and costs 14.99. Orders "
        "placed before 2 pm ship the same business day.",
    ),
    (
        "order-tracking",
        "Shipping",
        "Tracking an order",
        "Every order that has shipped has a tracking number (UPS numbers start with 1Z). The "
        "shipping confirmation email contains a tracking link; carrier scans can take up to "
        "24 hours to appear after the label is created.",
    ),
    (
        "international-shipping",
        "Shipping",
        "Do you ship to Canada and other countries?",
        "We ship to Canada, the United Kingdom and the European Union. International delivery "
        "takes 7 to 14 business days and costs 19.99; import duties and taxes are collected by "
        "the carrier on delivery. We do not ship batteries or candles internationally.",
    ),
    (
        "change-shipping-address",
        "Orders",
        "Changing the shipping address",
        "The shipping address can be changed until the order ships. After it has shipped we "
        "can ask the carrier to redirect the parcel (escalate_to_carrier with the new "
        "address); redirects usually add 1 to 2 days and are not guaranteed.",
    ),
    (
        "cancel-order",
        "Orders",
        "Cancelling an order",
        "Orders can be cancelled until they ship; the payment is refunded in full "
        "automatically. Once an order has shipped it can no longer be cancelled: the customer "
        "can refuse the delivery or return the unused items within 30 days.",
    ),
    (
        "order-changes",
        "Orders",
        "Adding or removing items from an order",
        "Items can not be added to an order that has been placed. Cancel the order before it "
        "ships and place a new one, or place a second order; orders placed within an hour of "
        "each other to the same address ship together.",
    ),
    (
        "duplicate-charge",
        "Payments",
        "Charged twice for one order",
        "A second amount on a card statement is usually a pending authorization that drops "
        "off by itself within 3 to 5 business days; only captured payments are money taken. "
        "If get_order shows two captured payments for one order, refund the duplicate "
        "immediately and apologise; the refund takes 3 to 5 business days to show.",
    ),
    (
        "payment-methods",
        "Payments",
        "Accepted payment methods",
        "We accept Visa, Mastercard, American Express, PayPal, Apple Pay and gift cards. The "
        "card is charged when the order is placed; pre-orders are charged when they ship.",
    ),
    (
        "invoices",
        "Payments",
        "Invoices and receipts for business expenses",
        "Every order confirmation email is a receipt. A VAT or company invoice with the "
        "company name and tax id can be downloaded from the order page in the customer's "
        "account, or support can send it on request.",
    ),
    (
        "price-adjustments",
        "Payments",
        "Price drops after purchase",
        "If an item's price drops within 14 days of purchase we refund the difference once "
        "on request. Sale prices during clearance events are excluded.",
    ),
    (
        "goodwill-credit",
        "Internal",
        "Goodwill gestures (internal)",
        "Support may refund up to 19.99 as a goodwill gesture for a late or disappointing "
        "delivery without approval. Anything from 20.00 up needs an approver. Never promise a "
        "goodwill refund before it is issued.",
    ),
    (
        "approval-policy",
        "Internal",
        "What needs an approver (internal)",
        "Refunds of 20.00 or more, cancellations, address changes and every message to a "
        "customer are approved by a second person before they happen. Refunds outside the "
        "return policy are exceptions that the approver decides case by case.",
    ),
    (
        "reply-tone",
        "Internal",
        "How we write to customers (internal)",
        "Greet by first name, say what happened and what we did in plain words, give a date "
        "when something will happen, and sign as the support team. Apologise once, not in "
        "every sentence. Never blame the carrier or the customer, never share internal notes.",
    ),
    (
        "escalation-path",
        "Internal",
        "Angry or repeat-contact customers (internal)",
        "When a customer writes for the third time about the same problem, read the notes "
        "first, acknowledge the earlier contacts, take one concrete action now (a trace, a "
        "refund, a replacement), note it on the customer and remember it for next time.",
    ),
    (
        "backorders-restock",
        "Products",
        "Out of stock items, backorders and restock dates",
        "When an item is out of stock the product page shows the expected restock date. "
        "Customers can sign up for a back-in-stock email. We do not take backorders: an item "
        "can be ordered again once it is in stock, usually within 2 to 4 weeks.",
    ),
    (
        "product-care-stoneware",
        "Products",
        "Caring for stoneware and ceramics",
        "Our stoneware teapots and mugs are dishwasher safe but not microwave safe when they "
        "have a metallic glaze. Sudden temperature changes can crack the glaze.",
    ),
    (
        "product-care-cast-iron",
        "Products",
        "Seasoning a cast iron skillet",
        "Cast iron skillets come pre-seasoned. Wash by hand, dry on the stove and rub in a "
        "drop of oil. Rust spots are not a defect: scrub them off and re-season.",
    ),
    (
        "warranty",
        "Products",
        "Warranty on electronics",
        "Electronics (earbuds, speakers, chargers, lamps) have a 2-year warranty against "
        "defects. A defective item is replaced; if no replacement is available it is refunded. "
        "Damage from drops or water is not covered.",
    ),
    (
        "sizing-guide",
        "Products",
        "Apparel sizing guide",
        "Our apparel runs true to size. The rain jacket is cut roomy to fit over a sweater; "
        "customers between sizes should pick the smaller one.",
    ),
    (
        "gift-cards",
        "Account",
        "Gift cards",
        "Gift cards never expire and can be used for several orders. Lost gift card codes can "
        "be resent to the buyer's email address. Gift cards can not be refunded for cash.",
    ),
    (
        "password-reset",
        "Account",
        "Resetting your password",
        "Use 'Forgot password' on the sign-in page; the reset email arrives within minutes. "
        "If it does not, check the spam folder and that the email address matches the account. "
        "Support can not set a password for a customer.",
    ),
    (
        "account-deletion",
        "Account",
        "Deleting an account and personal data",
        "Customers can ask us to delete their account and personal data. We keep order "
        "records for 7 years for tax reasons but remove contact details and notes within 30 "
        "days of the request.",
    ),
    (
        "loyalty-tiers",
        "Account",
        "Loyalty tiers: standard, gold and VIP",
        "Gold customers get free standard shipping on every order; VIP customers get free "
        "express shipping and a dedicated reply within 4 business hours.",
    ),
    (
        "contact-hours",
        "Account",
        "Support hours",
        "Support answers email every day from 8 am to 8 pm Eastern time, and by phone on "
        "weekdays from 9 am to 5 pm.",
    ),
    (
        "holiday-deadlines",
        "Shipping",
        "Holiday shipping deadlines",
        "For delivery before December 24, order by December 17 with standard shipping or by "
        "December 21 with express shipping.",
    ),
    (
        "tea-club",
        "Products",
        "The monthly tea club subscription",
        "The tea club ships a new selection on the first business day of each month. It can "
        "be paused or cancelled any time before the 25th of the previous month.",
    ),
]
