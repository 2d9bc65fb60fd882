"""The grammar model: a small English grammar, its parses, training, the report card, knockout and sweep."""
