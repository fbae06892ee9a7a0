import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long test (skipped by --quick runs)")


@pytest.fixture
def pool():
    from interpool import InterpreterPoolExecutor

    with InterpreterPoolExecutor(max_workers=2) as p:
        yield p
