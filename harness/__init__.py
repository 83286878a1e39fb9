"""What the tests and the benchmark and evaluation scripts share: a real Parlour server on an
ephemeral port with a strict Realtime client (realtime.py), OpenAI-shaped sessions (sessions.py)
and what Home Assistant sends (home_assistant.py).
Not installed with Parlour; the tests and scripts find it beside them."""
