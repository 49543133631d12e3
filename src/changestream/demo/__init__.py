"""The tours ``changestream demo`` runs, written with the public API only: the guided tour of
the query workflow (``tour``, with ``workflow`` and ``tail`` for its longer steps), the
partitions following a skewed load (``load``), and a stream run on Spark into event files and
a Delta replica (``pipeline``)."""
