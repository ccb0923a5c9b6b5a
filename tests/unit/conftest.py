import pytest


@pytest.fixture(autouse=True)
def _no_fabric_tag_of_the_caller(request, monkeypatch):
    """Unit tests see the fabric tag they set themselves, not the one of the shell that runs them (a developer's
    TESTBED_FABRIC_TAG would hide the run states the tests write). Tests that bring a fabric up keep theirs."""
    if "root" not in request.keywords:
        monkeypatch.delenv("TESTBED_FABRIC_TAG", raising=False)
