"""Tools Parlour runs itself: those of the MCP servers it is given (mcp.py), offered to the model
by the turn engine on every front end that brings no tools of its own (toolbox.py)."""
