"""A real Home Assistant core on 127.0.0.1, set up as a person sets it up, for the tests and evaluations
that put Parlour behind it.

`harness/home_assistant.py` writes by hand what HA's Ollama integration sends; this module runs HA
itself (installed by scripts/install_home_assistant into a cache outside the repository), so what
Parlour is tested against is what HA really sends and how HA really reads the answers:

- a home of template entities that need no hardware: lights, switches, a lock, a fan, a cover, a
  thermostat and a temperature sensor, each backed by an `input_boolean`/`input_number` so a command really changes a
  state, in several areas, all exposed to Assist;
- onboarding done over HA's HTTP API (the owner, then a token), as the browser does it;
- the Ollama and Wyoming integrations added through their config flows with the requests HA's UI
  makes (`/api/config/config_entries/flow`, then the Ollama "Add conversation agent" subentry flow,
  every field as the form pre-fills it except the model and the LLM API a person picks);
- `conversation/process` and entity states over HA's websocket and REST APIs.

`RecordingProxy` sits between HA and Parlour on loopback and keeps every request HA sends, so a
test can assert on (and store) the exact bodies.

Synchronous on purpose: it runs beside Parlour's threaded test server, and each call is a whole step.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from harness.realtime import free_port

REPO = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = REPO / "scripts" / "install_home_assistant"


class HomeAssistantUnavailable(RuntimeError):
    """HA cannot be installed here (no Python 3.14, no package index...): tests skip on this alone."""


def install(timeout: float = 1800) -> str:
    """The `hass` executable, installing HA into its cache on first use (a later call is a quick
    check). Raises HomeAssistantUnavailable with the installer's one line when it cannot."""
    run = subprocess.run([str(INSTALL_SCRIPT), "--print"], capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        raise HomeAssistantUnavailable(lines[-1] if lines else f"{INSTALL_SCRIPT.name} exited {run.returncode}")
    return run.stdout.strip().splitlines()[-1]




# --- the home ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    name: str  # as a person would say it; the entity id is derived from it, as HA does
    domain: str  # light, switch, lock, fan, cover, climate, sensor
    area: str

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.name.lower()).strip("_")

    @property
    def entity_id(self) -> str:
        return f"{self.domain}.{self.slug}"


HOME = (
    Device("Kitchen Light", "light", "Kitchen"),
    Device("Living Room Lamp", "light", "Living Room"),
    Device("Bedroom Light", "light", "Bedroom"),
    Device("Hallway Light", "light", "Hallway"),
    Device("Coffee Maker", "switch", "Kitchen"),
    Device("Office Heater", "switch", "Office"),
    Device("Front Door", "lock", "Hallway"),
    Device("Bedroom Fan", "fan", "Bedroom"),
    Device("Garage Door", "cover", "Garage"),
    Device("Thermostat", "climate", "Living Room"),
    Device("Outdoor Temperature", "sensor", "Garden"),
)


def _act(action: str, entity_id: str, **data: Any) -> dict:
    return {"action": action, "target": {"entity_id": entity_id}, **({"data": data} if data else {})}


def _on_off(on: str) -> dict:
    """A template entity that is on while the helper `on` is, and turns it on and off."""
    return {"state": f"{{{{ is_state('{on}', 'on') }}}}", "turn_on": [_act("input_boolean.turn_on", on)],
            "turn_off": [_act("input_boolean.turn_off", on)]}


def configuration(home: tuple[Device, ...], port: int) -> dict:
    """configuration.yaml (as JSON, which is YAML too) for `home` with HA's HTTP server on `port`.

    Each device's state lives in a helper (`input_boolean.<slug>`, `input_number.<slug>_level`), not
    exposed to Assist, that the template entity reads and its actions set."""
    booleans: dict[str, dict] = {}
    numbers: dict[str, dict] = {}
    templates: dict[str, list[dict]] = {}
    for device in home:
        on, level = f"input_boolean.{device.slug}", f"input_number.{device.slug}_level"
        entity: dict[str, Any] = {"name": device.name, "unique_id": f"parlour_{device.slug}"}
        if device.domain in ("light", "switch", "fan", "lock", "climate"):
            booleans[device.slug] = {"name": f"{device.name} state"}
        if device.domain == "light":
            numbers[f"{device.slug}_level"] = {"name": f"{device.name} level", "min": 0, "max": 255,
                                              "step": 1, "initial": 0}
            entity |= _on_off(on) | {
                "level": f"{{{{ states('{level}') | int(0) }}}}",
                "set_level": [_act("input_number.set_value", level, value="{{ brightness }}"),
                              _act("input_boolean.turn_on", on)],
            }
        elif device.domain == "switch":
            entity |= _on_off(on)
        elif device.domain == "lock":
            entity |= {"state": f"{{{{ 'locked' if is_state('{on}', 'on') else 'unlocked' }}}}",
                       "lock": [_act("input_boolean.turn_on", on)],
                       "unlock": [_act("input_boolean.turn_off", on)]}
        elif device.domain == "fan":
            numbers[f"{device.slug}_level"] = {"name": f"{device.name} level", "min": 0, "max": 100,
                                              "step": 1, "initial": 0}
            entity |= _on_off(on) | {
                "percentage": f"{{{{ states('{level}') | int(0) }}}}",
                "set_percentage": [_act("input_number.set_value", level, value="{{ percentage }}"),
                                   _act("input_boolean.turn_on", on)],
            }
        elif device.domain == "cover":
            numbers[f"{device.slug}_level"] = {"name": f"{device.name} position", "min": 0, "max": 100,
                                              "step": 1, "initial": 0}
            entity |= {
                "device_class": "garage" if "garage" in device.slug else "shutter",
                "position": f"{{{{ states('{level}') | int(0) }}}}",
                "open_cover": [_act("input_number.set_value", level, value=100)],
                "close_cover": [_act("input_number.set_value", level, value=0)],
                "set_cover_position": [_act("input_number.set_value", level, value="{{ position }}")],
            }
        elif device.domain == "climate":  # heating on (the boolean) or off, a target temperature
            numbers[f"{device.slug}_level"] = {"name": f"{device.name} target", "min": 5, "max": 30,
                                              "step": 0.5, "initial": 20}
            entity |= {
                "hvac_modes": "{{ ['heat', 'off'] }}",
                "hvac_mode": f"{{{{ 'heat' if is_state('{on}', 'on') else 'off' }}}}",
                "current_temperature": "19.5",
                "target_temperature": f"{{{{ states('{level}') | float(20) }}}}",
                "temperature_unit": "°C", "min_temperature": 5, "max_temperature": 30,
                "set_hvac_mode": [{"action": "input_boolean.turn_{{ 'on' if hvac_mode == 'heat' else 'off' }}",
                                   "target": {"entity_id": on}}],
                "set_temperature": [_act("input_number.set_value", level, value="{{ temperature }}")],
            }
        elif device.domain == "sensor":
            entity |= {"state": "12.5", "device_class": "temperature", "unit_of_measurement": "°C",
                       "state_class": "measurement"}
        else:
            raise ValueError(f"no template for {device.domain}")
        templates.setdefault(device.domain, []).append(entity)
    return {
        "homeassistant": {"name": "Home", "unit_system": "metric", "time_zone": "UTC", "country": "GB",
                          "latitude": 51.5, "longitude": -0.12, "elevation": 10, "currency": "GBP"},
        "http": {"server_host": "127.0.0.1", "server_port": port},
        "logger": {"default": "warning", "logs": {"homeassistant.components.ollama": "debug",
                                                  "homeassistant.components.wyoming": "debug"}},
        "conversation": {},
        "assist_pipeline": {},
        "input_boolean": booleans,
        "input_number": numbers,
        "template": [{domain: entities} for domain, entities in templates.items()],
    }


# --- HA itself --------------------------------------------------------------------------------

@dataclass
class HomeAssistantCore:
    """A running HA, onboarded, with `home`'s entities placed in their areas and exposed to Assist.

    `start()` returns once HA reports RUNNING; `stop()` ends the process. The configuration folder
    and HA's log (`home-assistant.log` in it) stay for a failing test to show."""

    config_dir: Path
    home: tuple[Device, ...] = HOME
    hass: str | None = None  # the `hass` executable; install() when None
    port: int = 0
    token: str = ""
    refresh_token: str = ""  # to sign in again after a restart of HA on the same folder
    process: subprocess.Popen | None = None
    started_seconds: float = 0.0  # from starting the process to RUNNING, onboarded
    _ws: Any = None
    _ws_id: int = 0
    _ws_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client_id(self) -> str:
        """The browser's OAuth client id: a URL on HA's own origin, as the frontend uses."""
        return f"{self.url}/"

    def start(self, timeout: float = 300) -> HomeAssistantCore:
        hass = self.hass or install()
        self.port = self.port or free_port()
        self.config_dir.mkdir(parents=True, exist_ok=True)
        (self.config_dir / "configuration.yaml").write_text(json.dumps(configuration(self.home, self.port), indent=1))
        # Settings > System > Network with only the loopback adapter: HA's mDNS resolver (which its
        # HTTP client uses even without the zeroconf integration) then joins no multicast group on
        # the machine's network, so nothing HA does leaves 127.0.0.1.
        storage = self.config_dir / ".storage"
        storage.mkdir(exist_ok=True)
        network = storage / "core.network"
        if not network.exists():
            network.write_text(json.dumps({"version": 1, "minor_version": 1, "key": "core.network",
                                           "data": {"configured_adapters": ["lo"]}}))
        begin = time.monotonic()
        with open(self.config_dir / "hass.stdout", "ab") as out:
            # --skip-pip: the installer put every requirement in place; nothing is fetched at run time.
            self.process = subprocess.Popen(
                ["nice", "-n", "19", hass, "-c", str(self.config_dir), "--skip-pip"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = begin + timeout
        while not self._http_up():
            if self.process.poll() is not None:
                raise RuntimeError(f"hass exited {self.process.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"HA's HTTP server did not answer in {timeout} s: {self.log_tail()}")
            time.sleep(0.5)
        self.onboard()
        while self.ws("get_config")["state"] != "RUNNING":
            if time.monotonic() > deadline:
                raise TimeoutError(f"HA did not reach RUNNING in {timeout} s: {self.log_tail()}")
            time.sleep(0.5)
        self.place_home()
        self.started_seconds = time.monotonic() - begin
        return self

    def stop(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> HomeAssistantCore:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        for name in ("home-assistant.log", "hass.stdout"):
            path = self.config_dir / name
            if path.exists() and path.stat().st_size:
                return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def _http_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/onboarding", timeout=2):
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    # --- HTTP and websocket APIs ---

    def rest(self, method: str, path: str, body: Any = None, *, form: dict | None = None,
             auth: bool = True) -> Any:
        """One call of HA's HTTP API; the JSON answer. An HTTP error raises with HA's message."""
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        data = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{method} {path}: {error.code} {error.read().decode(errors='replace')}") from None
        return json.loads(text) if text else None

    def ws(self, kind: str, timeout: float = 120, **payload: Any) -> Any:
        """One command on HA's websocket API (`/api/websocket`, authenticated once); its result."""
        with self._ws_lock:
            if self._ws is None:
                self._ws = connect(f"ws://127.0.0.1:{self.port}/api/websocket", max_size=None, open_timeout=30)
                assert json.loads(self._ws.recv(30))["type"] == "auth_required"
                self._ws.send(json.dumps({"type": "auth", "access_token": self.token}))
                answer = json.loads(self._ws.recv(30))
                if answer["type"] != "auth_ok":
                    raise RuntimeError(f"HA refused the token: {answer}")
            self._ws_id += 1
            self._ws.send(json.dumps({"id": self._ws_id, "type": kind, **payload}))
            while True:
                message = json.loads(self._ws.recv(timeout))
                if message.get("id") == self._ws_id and message["type"] == "result":
                    if not message["success"]:
                        raise RuntimeError(f"{kind}: {message['error']}")
                    return message["result"]

    # --- set-up as a person does it ---

    def onboard(self) -> None:
        """The onboarding pages' requests: the owner account, a token for it (the code grant the
        browser uses), analytics (left off) and the integrations step. The location step is left
        out: it adds the weather, radio and Google Translate integrations, which would reach the
        internet (the location is in configuration.yaml instead). On a folder onboarded before
        (HA restarted), the refresh token signs in again instead."""
        done = {step["step"] for step in self.rest("GET", "/api/onboarding", auth=False) if step["done"]}
        if "user" in done:
            if not self.refresh_token:
                raise RuntimeError(f"{self.config_dir} was onboarded by another run: no token for it")
            self.token = self.rest("POST", "/auth/token", form={
                "grant_type": "refresh_token", "refresh_token": self.refresh_token,
                "client_id": self.client_id}, auth=False)["access_token"]
            return
        created = self.rest("POST", "/api/onboarding/users", {
            "client_id": self.client_id, "name": "Parlour Test", "username": "parlour",
            "password": "parlour-test-password", "language": "en"}, auth=False)
        tokens = self.rest("POST", "/auth/token", form={
            "grant_type": "authorization_code", "code": created["auth_code"], "client_id": self.client_id},
            auth=False)
        self.token, self.refresh_token = tokens["access_token"], tokens["refresh_token"]
        self.rest("POST", "/api/onboarding/analytics", {})
        self.rest("POST", "/api/onboarding/integration",
                  {"client_id": self.client_id, "redirect_uri": f"{self.client_id}?auth_callback=1"})

    def place_home(self) -> None:
        """Areas created and the template entities put in them and exposed to Assist, as done in
        Settings > Areas and Settings > Voice assistants > Expose (locks are not exposed by default)."""
        areas = {area["name"]: area["area_id"] for area in self.ws("config/area_registry/list")}
        for device in self.home:
            if device.area not in areas:
                areas[device.area] = self.ws("config/area_registry/create", name=device.area)["area_id"]
            self.ws("config/entity_registry/update", entity_id=device.entity_id, area_id=areas[device.area])
        self.ws("homeassistant/expose_entity", assistants=["conversation"],
                entity_ids=[device.entity_id for device in self.home], should_expose=True)

    def flow(self, handler: Any, answers: dict[str, Any], *, subentry: bool = False, options: bool = False) -> dict:
        """A config flow (or subentry flow, or an entry's options flow: its Configure button) as the
        UI drives it: start it, then submit each form with the fields the form pre-fills (suggested
        value, else default) overridden by `answers`. Returns the final step (`create_entry`, or
        `abort`); a form shown again with errors raises."""
        kind = "subentries/" if subentry else "options/" if options else ""
        base = f"/api/config/config_entries/{kind}flow"
        step = self.rest("POST", base, {"handler": handler, "show_advanced_options": False})
        while step["type"] == "form":
            if step.get("errors"):
                raise RuntimeError(f"{handler}: the form {step['step_id']} says {step['errors']}")
            data = prefilled(step.get("data_schema", []))
            data.update({key: value for key, value in answers.items()
                         if any(f["name"] == key for f in step.get("data_schema", []))})
            step = self.rest("POST", f"{base}/{step['flow_id']}", data)
        while step["type"] == "progress":  # Ollama's model download step, if the model is not listed
            time.sleep(1)
            step = self.rest("GET", f"{base}/{step['flow_id']}")
        return step

    def add_ollama(self, url: str, model: str = "parlour:latest", llm_api: str = "assist") -> str:
        """Settings > Add integration > Ollama with `url`, then "Add conversation agent" with `model`
        and the LLM API `llm_api` ("Assist"), every other field as pre-filled. The agent's entity id."""
        entry = self.flow("ollama", {"url": url})
        if entry["type"] != "create_entry":
            raise RuntimeError(f"the Ollama config flow ended with {entry}")
        entry_id = entry["result"]["entry_id"]
        sub = self.flow([entry_id, "conversation"], {"model": model, "llm_hass_api": [llm_api]}, subentry=True)
        if sub["type"] != "create_entry":
            raise RuntimeError(f"the Ollama conversation agent flow ended with {sub}")
        return self.agent("ollama", entry_id)

    def add_wyoming(self, host: str, port: int) -> dict:
        """Settings > Add integration > Wyoming Protocol with `host` and `port`: the config entry."""
        step = self.flow("wyoming", {"host": host, "port": port})
        if step["type"] != "create_entry":
            raise RuntimeError(f"the Wyoming config flow ended with {step}")
        return step["result"]

    def add_mcp_server(self, llm_api: str = "assist") -> dict:
        """Settings > Add integration > Model Context Protocol Server, then its Configure button with
        "Expose all AI tools" off and the LLM API `llm_api` ("Assist") picked: the flow itself adds
        an entry that serves every LLM API, and the choice of one is its options. `/api/mcp` then
        serves that API's tools to a user with a token. The config entry."""
        entry = self.flow("mcp_server", {})
        if entry["type"] != "create_entry":
            raise RuntimeError(f"the Model Context Protocol Server config flow ended with {entry}")
        chosen = self.flow(entry["result"]["entry_id"], {"all_llm_apis": False, "llm_hass_api": [llm_api]},
                           options=True)
        if chosen["type"] != "create_entry":
            raise RuntimeError(f"the Model Context Protocol Server options flow ended with {chosen}")
        return entry["result"]

    def long_lived_token(self, name: str) -> str:
        """Profile > Security > Long-lived access tokens > Create token, named `name`: the token, made
        over the websocket API with the lifespan the page asks for (ten years)."""
        return self.ws("auth/long_lived_access_token", client_name=name, lifespan=3650)

    @property
    def mcp_url(self) -> str:
        """The mcp_server integration's Streamable HTTP endpoint, serving the LLM APIs it is set to."""
        return f"{self.url}/api/mcp"

    def agent(self, platform: str, entry_id: str | None = None, deadline: float = 60) -> str:
        """The entity id of `platform`'s conversation entity (of config entry `entry_id`, if given),
        once registered."""
        end = time.monotonic() + deadline
        while True:
            for entry in self.ws("config/entity_registry/list"):
                if (entry["platform"] == platform and entry["entity_id"].startswith("conversation.")
                        and entry_id in (None, entry["config_entry_id"])):
                    return entry["entity_id"]
            if time.monotonic() > end:
                raise TimeoutError(f"no conversation entity of {platform}")
            time.sleep(0.5)

    # --- using it ---

    def converse(self, text: str, agent_id: str, conversation_id: str | None = None,
                 timeout: float = 300) -> dict:
        """`conversation/process` as the Assist dialog sends it; HA's whole answer (`response` with
        `speech.plain.speech` and `response_type`, `conversation_id`, `continue_conversation`)."""
        payload = {"text": text, "agent_id": agent_id, "language": "en"}
        if conversation_id:
            payload["conversation_id"] = conversation_id
        return self.ws("conversation/process", timeout=timeout, **payload)

    def add_pipeline(self, name: str, conversation_engine: str, **engines: Any) -> str:
        """Settings > Voice assistants > Add assistant: a pipeline using `conversation_engine`
        (and `stt_engine`, `tts_engine`, ... when given). Its id."""
        fields = {"conversation_engine": conversation_engine, "conversation_language": "en", "language": "en",
                  "name": name, "stt_engine": None, "stt_language": None, "tts_engine": None,
                  "tts_language": None, "tts_voice": None, "wake_word_entity": None, "wake_word_id": None,
                  "prefer_local_intents": False}
        return self.ws("assist_pipeline/pipeline/create", **{**fields, **engines})["id"]

    def run_pipeline(self, text: str, pipeline: str | None = None, conversation_id: str | None = None,
                     timeout: float = 300) -> list[dict]:
        """An Assist pipeline run from text (the intent stage alone, as the Assist dialog types it):
        its events, `run-start` to `run-end`; an `error` event ends it too."""
        payload: dict[str, Any] = {"start_stage": "intent", "end_stage": "intent", "input": {"text": text}}
        if pipeline:
            payload["pipeline"] = pipeline
        if conversation_id:
            payload["conversation_id"] = conversation_id
        events: list[dict] = []
        if self._ws is None:
            self.ws("get_config")  # connects and authenticates
        with self._ws_lock:
            self._ws_id += 1
            self._ws.send(json.dumps({"id": self._ws_id, "type": "assist_pipeline/run", **payload}))
            while True:
                message = json.loads(self._ws.recv(timeout))
                if message.get("id") != self._ws_id:
                    continue
                if message["type"] == "result" and not message["success"]:
                    raise RuntimeError(f"assist_pipeline/run: {message['error']}")
                if message["type"] == "event":
                    events.append(message["event"])
                    if message["event"]["type"] in ("run-end", "error"):
                        return events

    def run_voice_pipeline(self, pcm: bytes, pipeline: str, sample_rate: int = 16_000,
                           end_stage: str = "tts", timeout: float = 300) -> list[dict]:
        """An Assist pipeline run from speech, as a voice satellite streams it: 16-bit mono `pcm`
        at `sample_rate` sent as binary frames (the handler id the run gives, then 20 ms of audio),
        then an empty frame to end it. The events through `run-end` (or `error`)."""
        if self._ws is None:
            self.ws("get_config")
        events: list[dict] = []
        with self._ws_lock:
            self._ws_id += 1
            run_id = self._ws_id
            self._ws.send(json.dumps({"id": run_id, "type": "assist_pipeline/run", "start_stage": "stt",
                                      "end_stage": end_stage, "pipeline": pipeline,
                                      "input": {"sample_rate": sample_rate}}))
            sent = False
            while True:
                message = json.loads(self._ws.recv(timeout))
                if message.get("id") != run_id:
                    continue
                if message["type"] == "result" and not message["success"]:
                    raise RuntimeError(f"assist_pipeline/run: {message['error']}")
                if message["type"] != "event":
                    continue
                event = message["event"]
                events.append(event)
                if event["type"] == "run-start" and not sent:
                    handler = bytes([event["data"]["runner_data"]["stt_binary_handler_id"]])
                    step = sample_rate * 2 // 50
                    for start in range(0, len(pcm), step):
                        self._ws.send(handler + pcm[start:start + step])
                    self._ws.send(handler)  # the end of the audio
                    sent = True
                if event["type"] in ("run-end", "error"):
                    return events

    def state(self, entity_id: str) -> dict:
        """An entity's state object from the REST API (`state`, `attributes`, ...)."""
        return self.rest("GET", f"/api/states/{entity_id}")

    def call(self, domain: str, service: str, **data: Any) -> Any:
        """A service (action) call through the REST API, to set a starting state."""
        return self.rest("POST", f"/api/services/{domain}/{service}", data)


def prefilled(schema: list[dict]) -> dict[str, Any]:
    """What HA's frontend puts in a flow form before a person types: each field's suggested value,
    else its default (`computeInitialHaFormData`); optional fields with neither are left out."""
    data: dict[str, Any] = {}
    for field_ in schema:
        suggested = (field_.get("description") or {}).get("suggested_value")
        if suggested is not None:
            data[field_["name"]] = suggested
        elif "default" in field_:
            data[field_["name"]] = field_["default"]
    return data


def speech(answer: dict) -> str:
    """The words HA would speak for a `converse()` answer."""
    return answer["response"]["speech"].get("plain", {}).get("speech", "")


# --- seeing what HA sends ----------------------------------------------------------------------

class RecordingProxy:
    """A TCP relay on 127.0.0.1 in front of `target_port` that keeps the bytes clients send, so the
    exact requests HA makes to Parlour can be read back (`requests()`). The `Host` header is rewritten
    to the target's port, so Parlour's host check sees its own address."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sent: list[bytearray] = []  # one buffer per connection, client to server
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            buffer = bytearray()
            with self._lock:
                self._sent.append(buffer)
            old, new = f"127.0.0.1:{self.port}".encode(), f"127.0.0.1:{self.target_port}".encode()
            threading.Thread(target=self._pipe, args=(client, upstream, buffer, old, new), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, None, b"", b""), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, keep: bytearray | None,
              old: bytes, new: bytes) -> None:
        try:
            while chunk := source.recv(65536):
                if keep is not None:
                    with self._lock:
                        keep.extend(chunk)
                    chunk = chunk.replace(b"Host: " + old, b"Host: " + new).replace(b"host: " + old, b"host: " + new)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def requests(self) -> list[tuple[str, str, dict[str, str], bytes]]:
        """(method, path, headers, body) of every whole request so far, in order per connection."""
        out = []
        with self._lock:
            streams = [bytes(buffer) for buffer in self._sent]
        for stream in streams:
            while b"\r\n\r\n" in stream:
                head, rest = stream.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {name.strip().lower(): value.strip()
                           for name, value in (line.split(":", 1) for line in lines[1:] if ":" in line)}
                if "chunked" in headers.get("transfer-encoding", ""):
                    body = bytearray()
                    while True:
                        size_line, rest = rest.split(b"\r\n", 1)
                        size = int(size_line.split(b";")[0], 16)
                        body.extend(rest[:size])
                        rest = rest[size + 2:]
                        if size == 0:  # no trailers: the chunk's own CRLF ended the body
                            break
                    body = bytes(body)
                else:
                    length = int(headers.get("content-length", "0"))
                    if len(rest) < length:  # still arriving
                        break
                    body, rest = rest[:length], rest[length:]
                out.append((method, path, headers, body))
                stream = rest
        return out

    def chat_bodies(self) -> list[dict]:
        """The JSON bodies of every `POST /api/chat` so far."""
        return [json.loads(body) for method, path, _, body in self.requests()
                if method == "POST" and path.split("?")[0] == "/api/chat"]

    def close(self) -> None:
        self._listener.close()


def hass_version(hass: str) -> str:
    return subprocess.run([hass, "--version"], capture_output=True, text=True, timeout=120).stdout.strip()


__all__ = ["HOME", "Device", "HomeAssistantCore", "HomeAssistantUnavailable", "RecordingProxy",
           "configuration", "install", "prefilled", "speech", "free_port", "hass_version"]
