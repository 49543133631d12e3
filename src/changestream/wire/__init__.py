"""What the server and the remote client agree on: every endpoint declared once (``api``), its
typed request and response bodies (``models``), the JSON encoding of column values
(``values``) and of records, partitions, leases and errors (``records``). Both sides import
these; neither imports the other."""
