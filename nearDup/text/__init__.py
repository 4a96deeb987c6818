"""Reading documents: format detection and text extraction (the corpus reader moves here in the refactor)."""
