"""Plain text handling that every layer of the service may use, below the store and knowledge: the
one sentence splitter (`sentences`), the time of day a system prompt tells (`clock`) and whether two
transcripts say the same words (`same_words`). Nothing here imports the rest of `voice/`."""
