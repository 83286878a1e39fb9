"""Clients of the service: `parlour chat` (text, `chat`), `parlour talk` (push-to-talk microphone,
`talk`) and the page the service serves at `/` (`page.html`)."""
