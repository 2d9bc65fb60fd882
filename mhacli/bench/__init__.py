"""``mha bench``: timing the core against its own matrix products and its baselines, apart from the product."""
