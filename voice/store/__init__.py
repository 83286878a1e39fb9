"""The session store: one SQLite file of sessions, messages and summaries (`sessions`, its tables in
`schema`), and the one writer of a streaming reply's row (`reply_row`)."""
