"""The Parlour service: its configuration and command line, the turn engine, the session store, the
knowledge base, and the front ends that reach them (Realtime websocket, chat APIs, Wyoming)."""
