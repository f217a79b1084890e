"""Seeds for the PyTorch op's tests, the rule of the C++ tests (tests/support/seed.hpp): one run seed,
DEFAULT_SEED or the value of MEMATTN_TEST_SEED (decimal or 0x-hex), and each test's generators
(torch, random) seeded from it and the test's own name, so that a test draws the same inputs alone
as in the whole run, and a failure replays with the line its report prints. Never the clock."""
import hashlib
import os
import random

import pytest

DEFAULT_SEED = 20261124


def _run_seed():
    text = os.environ.get("MEMATTN_TEST_SEED", "")
    if not text:
        return DEFAULT_SEED
    try:
        seed = int(text, 0)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**64:
        raise pytest.UsageError(f"MEMATTN_TEST_SEED={text}: not an unsigned 64-bit integer (decimal or 0x-hex)")
    return seed


RUN_SEED = _run_seed()


def _test_name(item):
    """The module's file name and the test's name with its parameters: the same whatever folder
    pytest runs from (the node id's path part depends on the root directory)."""
    return os.path.basename(str(item.fspath)) + "::" + item.nodeid.split("::", 1)[-1]


def seed_for(name):
    """A 63-bit seed from the run seed and a stream name (stable across runs and platforms)."""
    digest = hashlib.sha256(f"{RUN_SEED}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _seed_generators(seed):
    random.seed(seed)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)  # every device's default generator


# Draws at import time (the parametrised error cases) come from the run seed too.
_seed_generators(seed_for("<collection>"))


def pytest_report_header(config):
    default = "" if os.environ.get("MEMATTN_TEST_SEED") else " (the default; set MEMATTN_TEST_SEED to draw others)"
    return f"memattn: random inputs from MEMATTN_TEST_SEED={RUN_SEED}{default}"


@pytest.fixture(autouse=True)
def memattn_seed(request):
    """Seeds torch and random for this test; the seed is the fixture's value."""
    seed = seed_for(_test_name(request.node))
    _seed_generators(seed)
    return seed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("memattn seed", f"replay with MEMATTN_TEST_SEED={RUN_SEED} python3 -m pytest "
                                                f"'{item.nodeid}' (generators seeded with {seed_for(_test_name(item))})"))
