"""Speech in the service: Realtime audio in and out (`audio`), the speaker that turns a streaming
reply into audio (`speaker`), and what a listener heard of it (`timeline`). The sentence splitter
the speaker cuts replies with is voice.text.sentences."""
