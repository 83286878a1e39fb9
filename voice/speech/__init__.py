"""Speech in the service: the one sentence splitter (`sentences`), Realtime audio in and out
(`audio`), the speaker that turns a streaming reply into audio (`speaker`), and what a listener
heard of it (`timeline`)."""
