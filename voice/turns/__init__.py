"""The turn engine every front end shares, one concern a module: `events` (the `TurnRequest` in and
the typed events out), `engine` (a turn: research, fit, generate, store), `prompt` (fitting the
session into the model's budget), `prompt_layout` (how the prompt lays out research and calls),
`tools` (what the model is offered and how), `upkeep` (warm-ups and summaries between turns),
`model_queue` (who uses the model next) and `figures` (one turn's measurements)."""
