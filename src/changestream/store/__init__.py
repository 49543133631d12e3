"""The embedded table store: catalog, transactions, splits and the change log in SQLite."""
