"""The chat APIs: Ollama's and OpenAI's, for clients that send the whole conversation each time
(Home Assistant's Ollama and LiteLLM integrations, Open WebUI, scripts). routes.py parses either
API into turn.py's `ChatRequest`; thread.py finds the session the conversation lives in; the turn
engine answers it as it answers the websocket; ollama.py and openai_chat.py write the replies."""
