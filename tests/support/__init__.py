"""What the tests share that is not a fixture: builders of records and runs, servers to run
against, and where the tests' inputs live. tests/ is on pytest's `pythonpath` (pyproject.toml),
so every test, whatever its folder, imports these as `support.<module>`."""
