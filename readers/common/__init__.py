"""What several store formats share: SQLite and PostgreSQL connections and schema sniffing, bounded
link-refusing fsspec reads and atomic writes, validation of untrusted rows, JSON Patch, URL display,
Arrow columns built from buffers (``columns``), and the two recovery journals a writable format uses:
in files inside the store (``filejournal``) or as a table in its database (``sqljournal``)."""
