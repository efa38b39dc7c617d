"""The demo shop: the company systems the bundled ticket tools act on."""
