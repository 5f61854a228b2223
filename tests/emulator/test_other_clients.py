"""What the service's other clients rely on (PROTOCOL.md, "What the service's other clients
rely on"): the official TypeScript SDK and the Langflow backend read these answers as the
service gives them. Each test names the client that breaks without it."""

from __future__ import annotations

import requests

from ..waiting import wait_until
from .helpers import Api

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBqDwxzQ4M6TQlSgm0wTT2n0Mv3P7l1c9sF1uLkvX7yN a@b"


def test_health_readiness_and_hosts(api: Api) -> None:
    # TS SDK: healthz() reads {up}, readyz() {ready}, listHosts() pages HostPublic.
    health = requests.get(api.emu.url + "/healthz", timeout=10).json()["data"]
    assert health == {"up": True}
    ready = requests.get(api.emu.url + "/readyz", timeout=10)
    assert (ready.status_code, ready.json()["data"]) == (200, {"ready": True})
    hosts = api.data("GET", "/v1/hosts")
    [host] = hosts["data"]
    assert host["status"] == "active" and "devbox:1" in host["rootfses"]
    assert hosts["pagination"] == {"total": 1, "limit": 100, "offset": 0, "count": 1}
    assert requests.get(api.emu.url + "/v1/hosts", timeout=10).status_code == 401


def test_devbox_is_in_the_catalog_and_successors_are_omitted(api: Api) -> None:
    # Every TS SDK example and the Langflow backend's default create on devbox:1.
    rootfs = api.data("GET", "/v1/rootfs")
    assert "devbox:1" in rootfs["rootfs"]
    entries = {e["name"]: e for e in rootfs["entries"]}
    assert "successor" not in entries["devbox:1"]  # omitted, never null
    assert entries["ubuntu-22.04"]["successor"] == "ubuntu-24.04"
    created = api.data("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb", "rootfs": "devbox:1"})
    assert created["rootfs"] == "devbox:1"


def test_every_success_answers_200(api: Api) -> None:
    # The Langflow backend takes only 200 for creation and resume: a 201 leaked its sandbox.
    created = api.call("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb"})
    assert created.status_code == 200
    sandbox_id = created.json()["data"]["id"]
    base = f"/v1/sandboxes/{sandbox_id}"
    assert api.call("POST", f"{base}/processes", json={"cmd": "true"}).status_code == 200
    assert api.call("POST", f"{base}/access-token").status_code == 200
    assert api.call("POST", f"{base}/pause").status_code == 200
    api.wait_status(sandbox_id, "paused")
    assert api.call("POST", f"{base}/resume").status_code == 200
    api.wait_status(sandbox_id, "running")
    assert api.call("POST", f"{base}/fork", json={}).status_code == 200
    assert api.call("POST", "/v1/networks", json={"name": "n"}).status_code == 200
    template = {"name": "t", "dockerfile": "FROM ubuntu:24.04\n"}
    assert api.call("POST", "/v1/templates", json=template).status_code == 200


def test_the_view_omits_what_it_lacks_and_shows_env_names_and_keys(api: Api) -> None:
    body = {"shape": "s-1vcpu-1gb", "envs": {"B_SECRET": "hunter2", "A": "1"}, "ssh_pubkeys": [KEY]}
    created = api.data("POST", "/v1/sandboxes", json=body)
    view = api.data("GET", f"/v1/sandboxes/{created['id']}")
    for answer in (created, view):
        assert None not in answer.values()
        assert not {"name", "paused_at", "auto_pause_after_seconds", "forked_from"} & set(answer)
        assert answer["envs"] == ["A", "B_SECRET"]  # names only: the value is never shown
        assert answer["ssh_pubkeys"] == [KEY]
    assert "hunter2" not in str(view)
    second = KEY.replace("a@b", "c@d")
    added = api.data("POST", f"/v1/sandboxes/{created['id']}/ssh-pubkeys", json={"keys": [second]})
    assert added == {"count": 2}
    assert api.data("GET", f"/v1/sandboxes/{created['id']}")["ssh_pubkeys"] == [KEY, second]


def test_the_ingress_template_shows_only_while_ingress_is_on(api: Api) -> None:
    # The TS SDK's previewUrl() trusts the template's presence after setIngress().
    created = api.data("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb"})
    assert "ingress_url_template" not in created
    path = f"/v1/sandboxes/{created['id']}"
    on = api.data("PATCH", path, json={"ingress_enabled": True})
    assert "<port>" in on["ingress_url_template"]
    off = api.data("PATCH", path, json={"ingress_enabled": False})
    assert "ingress_url_template" not in off
    with_ingress = api.data(
        "POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb", "ingress_enabled": True}
    )
    assert "<port>" in with_ingress["ingress_url_template"]


def test_auto_pause_is_omitted_once_disabled(api: Api) -> None:
    body = {"shape": "s-1vcpu-1gb", "auto_pause_after_seconds": 600}
    path = f"/v1/sandboxes/{api.data('POST', '/v1/sandboxes', json=body)['id']}"
    assert api.data("GET", path)["auto_pause_after_seconds"] == 600
    off = api.data("PATCH", path, json={"disable_auto_pause": True})
    assert "auto_pause_after_seconds" not in off


def test_the_egress_view_carries_the_sandbox_id(api: Api) -> None:
    sandbox_id = api.sandbox(egress=["pypi.org"])
    path = f"/v1/sandboxes/{sandbox_id}/egress"
    assert api.data("GET", path) == {"id": sandbox_id, "egress": ["pypi.org"]}
    assert api.data("PUT", path, json={"egress": None}) == {"id": sandbox_id, "egress": []}


def test_a_fail_says_why_in_data_and_in_message(api: Api) -> None:
    # The TS SDK builds its error text from data alone, the Python client from message.
    body = api.call("POST", "/v1/sandboxes", json={"shape": "s-nope"}).json()
    assert body["status"] == "fail"
    assert body["data"] == body["message"] == "unknown shape"
    # A fail with data of its own keeps it (the connect offset's oldest_available_seq).
    missing = api.call("GET", "/v1/sandboxes/sb-nope").json()
    assert missing["data"] == missing["message"] == "sandbox not found"


def test_names_are_short_and_unique_among_live_sandboxes(api: Api) -> None:
    # The Langflow backend keeps names to 22 characters and reports the service refusing
    # a name that a live (or destroying) sandbox holds.
    long = api.call("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb", "name": "x" * 23})
    assert long.status_code == 400
    assert "22" in long.json()["message"]
    first = api.sandbox(name="n" * 22)
    taken = api.call("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb", "name": "n" * 22})
    assert taken.status_code == 409
    assert taken.json()["message"] == "name is already used by a live sandbox"
    assert api.emu.live_sandboxes() == [first]
    api.data("DELETE", f"/v1/sandboxes/{first}")
    api.wait_status(first, "destroyed")
    again = api.sandbox(name="n" * 22)  # free once the holder is destroyed
    assert again != first


def test_disks_are_named_by_id_or_name_where_a_disk_is_given(api: Api) -> None:
    disk = api.data("POST", "/v1/disks", json={
        "name": "cache", "kind": "s3", "config": {"bucket": "b", "endpoint": "https://s3.x"},
        "credentials": {"access_key": "AKIA1", "secret_key": "s"},
    })  # fmt: skip
    body = {"shape": "s-1vcpu-1gb", "disks": [{"disk_id": "cache", "mount_path": "/mnt/c"}]}
    sandbox_id = api.data("POST", "/v1/sandboxes", json=body)["id"]
    [mount] = api.data("GET", f"/v1/sandboxes/{sandbox_id}/disks")["data"]
    assert (mount["disk_id"], mount["mount_path"]) == (disk["id"], "/mnt/c")
    attached = api.call(
        "POST", f"/v1/sandboxes/{sandbox_id}/disks", json={"disk_id": "cache", "mount_path": "/d"}
    )
    assert attached.status_code == 200
    unknown = {"disk_id": "nothing-here", "mount_path": "/e"}
    assert api.call("POST", f"/v1/sandboxes/{sandbox_id}/disks", json=unknown).status_code == 404


def test_templates_start_from_the_allowlisted_docker_bases(api: Api) -> None:
    for base in ("nodeops/sandbox:debian", "debian:trixie-slim"):
        dockerfile = f"FROM {base}\nRUN echo built > /workspace/marker\n"
        template = api.data("POST", "/v1/templates", json={"name": "t", "dockerfile": dockerfile})
        path = f"/v1/templates/{template['id']}"
        wait_until(lambda p=path: api.data("GET", p)["status"] in ("ready", "failed"), what="built")
        built = api.data("GET", path)
        assert built["status"] == "ready", api.call("GET", f"{path}/logs").text
        made = api.data(
            "POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb", "rootfs": template["id"]}
        )
        files = api.call(
            "GET", f"/v1/sandboxes/{made['id']}/files", params={"path": "/workspace/marker"}
        )
        assert files.content == b"built\n"
    unknown = {"name": "u", "dockerfile": "FROM nodeops/sandbox:alpine\n"}
    failed_id = api.data("POST", "/v1/templates", json=unknown)["id"]
    failed = f"/v1/templates/{failed_id}"
    wait_until(lambda: api.data("GET", failed)["status"] == "failed", what="refused base")


ECHO_PATH = """
import http.server
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", 8124), Echo).serve_forever()
"""


def test_a_path_appended_to_the_preview_url_reaches_that_path(api: Api) -> None:
    # The TS SDK's examples append "/items/42" to previewUrl(): the service's template has
    # no trailing slash, the emulator's has one, so the doubled slash means one.
    sandbox_id = api.sandbox(ingress_enabled=True)
    files = f"/v1/sandboxes/{sandbox_id}/files"
    api.data("PUT", files, params={"path": "/workspace/echo.py"}, data=ECHO_PATH.encode())
    start = {"cmd": "bash", "args": ["-c", "nohup python3 /workspace/echo.py >/dev/null 2>&1 &"]}
    api.data("POST", f"/v1/sandboxes/{sandbox_id}/exec", json=start)
    url = api.data("GET", f"/v1/sandboxes/{sandbox_id}")["ingress_url_template"]
    url = url.replace("<port>", "8124").rstrip("/")

    def seen(path: str) -> str:
        response = requests.get(url + path, timeout=10)
        return response.text if response.ok else f"HTTP {response.status_code}"

    wait_until(lambda: seen("/") == "/", what="the echo server")
    assert seen("/items/42?q=a") == "/items/42?q=a"
    assert seen("//items") == "/items"  # template + "/items", the template ending in "/"
