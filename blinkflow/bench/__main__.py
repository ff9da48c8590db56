"""``python -m blinkflow.bench SUITE ...``: benchmarks that measure peers in the same run."""
from .cli import main

if __name__ == "__main__":
    main()
