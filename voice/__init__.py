"""The Parlour service and its command line: configuration, CLI, and (as they arrive) the websocket server."""
