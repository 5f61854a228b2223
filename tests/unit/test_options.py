"""``LeaseOptions``: one validated value behind every surface that takes lease options."""

from __future__ import annotations

import inspect

import attrs
import pytest

import createos_sync as cs
from createos_sync.lease import DEFAULT_TTL, LeaseKeywords, LeaseOptions


def _keywords(function: object) -> set[str]:
    return set(inspect.signature(function).parameters) - {"self", "client"}  # type: ignore[arg-type]


def test_every_surface_takes_the_same_option_names() -> None:
    names = {field.name for field in attrs.fields(LeaseOptions)}
    assert _keywords(cs.lease) == names
    assert _keywords(cs.Client.lease) == names
    own = {"fn", "items", "concurrency", "setup", "return_exceptions", "progress", "executor"}
    own.add("reuse")
    assert _keywords(cs.map) - own == names


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"egress": "pypi.org"}, ValueError, "egress must be a sequence of rule strings"),
        (
            {"egress": [{"host": "pypi.org"}]},
            ValueError,
            "every egress rule must be a non-empty str",
        ),
        ({"egress": {"pypi.org": True}}, ValueError, "egress must be a sequence of rule strings"),
        ({"egress": [""]}, ValueError, "every egress rule must be a non-empty str"),
        ({"egress": ["pypi .org"]}, ValueError, "an egress rule must not contain spaces"),
        ({"auto_pause_after": 59}, ValueError, r"auto-pause must be whole seconds in 60\.\.86400"),
        (
            {"auto_pause_after": 60.5},
            ValueError,
            r"auto-pause must be whole seconds in 60\.\.86400",
        ),
        ({"ttl": 0}, ValueError, "ttl must be a positive, finite number of seconds"),
        ({"ttl": "900"}, TypeError, "ttl must be a number of seconds or None"),
        ({"ingress": "yes"}, TypeError, "ingress must be True, False or None"),
        ({"on_exit": "explode"}, ValueError, "on_exit must be one of destroy, keep, pause"),
        (
            {"sandbox_id": "sb-1", "fork_from": "sb-2"},
            ValueError,
            r"give sandbox_id \(attach\) or fork_from \(fork\), not both",
        ),
        (
            {"fork_from": "sb-2", "shape": "s-1vcpu-1gb"},
            ValueError,
            "shape cannot be chosen for an existing sandbox or a fork",
        ),
        (
            {"sandbox_id": "sb-1", "env": {"A": "1"}},
            ValueError,
            "egress, env and ingress apply to a new sandbox",
        ),
        ({"name": "has space"}, ValueError, "name may hold letters, digits"),
        ({"env": {"1BAD": "x"}}, ValueError, "invalid environment variable name '1BAD'"),
    ],
)
def test_invalid_options_raise_before_anything_is_sent(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        LeaseOptions(**options)  # type: ignore[arg-type]


def test_egress_rules_are_kept_as_strings_and_sent_as_egress() -> None:
    options = LeaseOptions(egress=["pypi.org", "*.github.com", "10.0.0.0/8"])
    assert options.egress == ("pypi.org", "*.github.com", "10.0.0.0/8")
    assert options.creation_body()["egress"] == ["pypi.org", "*.github.com", "10.0.0.0/8"]


def test_defaults_depend_on_how_the_sandbox_is_had() -> None:
    created, attached = LeaseOptions(), LeaseOptions(sandbox_id="sb-1")
    forked = LeaseOptions(fork_from="sb-1")
    assert (created.effective_on_exit, created.effective_ttl) == ("destroy", DEFAULT_TTL)
    assert (forked.effective_on_exit, forked.effective_ttl) == ("destroy", DEFAULT_TTL)
    assert (attached.effective_on_exit, attached.effective_ttl) == ("keep", None)
    assert LeaseOptions(ttl=None).effective_ttl is None
    assert LeaseOptions(sandbox_id="sb-1", ttl=60).effective_ttl == 60.0


def test_the_keywords_are_defined_once_for_every_surface() -> None:
    fields = {field.name for field in attrs.fields(LeaseOptions)}
    assert set(LeaseKeywords.__annotations__) == fields - {"shape"}
    for surface in (cs.lease, cs.Client.lease, cs.map):
        doc = surface.__doc__ or ""
        assert all(f"    {name}: " in doc for name in fields), surface


def test_an_unknown_keyword_is_a_type_error_naming_the_call() -> None:
    unknown = r"\(\) got an unexpected keyword argument 'shapes'"
    with pytest.raises(TypeError, match="^lease" + unknown):
        cs.lease(shapes="s-1vcpu-1gb")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="^map" + unknown):
        cs.map(print, [], shapes="s-1vcpu-1gb")  # type: ignore[call-arg]


def test_disks_networks_and_ssh_keys_survive_evolve() -> None:
    import attrs

    from createos_sync.lease import LeaseOptions

    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHJl user@host"
    options = LeaseOptions(disks={"/mnt/a": "cache"}, networks=["net_1"], ssh_keys=[key])
    again = attrs.evolve(options, name="x")
    assert (again.disks, again.networks, again.ssh_keys) == (
        (("/mnt/a", "cache"),),
        ("net_1",),
        (key,),
    )
    assert attrs.evolve(LeaseOptions(), name="y").disks == ()


def test_help_names_the_ttl_default_and_a_rootfs_the_catalog_has() -> None:
    import pydoc

    import createos_sync as cs
    from createos_sync.lease import TTL_DEFAULT

    for surface in (cs.lease, cs.Client.lease, cs.Lease.fork, cs.map):
        text = pydoc.render_doc(surface, renderer=pydoc.plaintext)
        assert "= Ellipsis" not in text and "ubuntu:24.04" not in text
        assert "= <TTL_DEFAULT: 900 s, off when attaching>" in text
    assert '"ubuntu-24.04"' in pydoc.render_doc(cs.lease, renderer=pydoc.plaintext)
    # ttl=... (the contract's spelling) and the named default are the same choice.
    for given in (..., TTL_DEFAULT):
        assert LeaseOptions(ttl=given).effective_ttl == DEFAULT_TTL
        assert LeaseOptions(ttl=given, sandbox_id="sb-1").effective_ttl is None
