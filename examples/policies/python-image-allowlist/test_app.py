"""Native unit tests of the allowlist, on the SDK's recording client and fixtures."""

import app
from cubepod_policy import testing


def test_images_are_compared_in_their_full_form():
    assert app.repository("python:3.12") == "docker.io/library/python"
    assert app.repository("someone/tool") == "docker.io/someone/tool"
    assert app.repository("localhost:5000/a/b@sha256:00") == "localhost:5000/a/b"
    assert app.allowed("ghcr.io/cubepod/sandbox-base:1.0")
    assert app.allowed("python:3.12")
    assert not app.allowed("ghcr.io/cubepodx/evil:1")
    assert not app.allowed("docker.io/library/python-evil:1")


def test_an_allowed_image_gets_the_default_children():
    client = testing.RecordingClient()
    app.ImageAllowlist().reconcile_sandbox(client, testing.reconcile_input(testing.sandbox("a")))
    assert client.summaries()[-1] == "ensure-pod a"


def test_an_image_outside_the_list_gets_nothing_and_the_reason():
    client = testing.RecordingClient()
    out = app.ImageAllowlist().reconcile_sandbox(
        client, testing.reconcile_input(testing.sandbox("b", "quay.io/someone/miner:latest")))
    assert client.summaries() == []
    valid = next(c for c in out.status.conditions if c.kind == "SpecValid")
    assert valid.reason == "ImageNotAllowed"
    assert valid.message == (
        'image "quay.io/someone/miner:latest" is not one this cluster runs sandboxes of: '
        "ghcr.io/cubepod/, docker.io/library/python")
    assert [e.reason for e in out.events] == ["ImageNotAllowed"]
