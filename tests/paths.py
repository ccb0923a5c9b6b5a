"""Where tests find the repository, its scenarios and their own data, wherever the test file sits."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
FIXTURES = os.path.join(TESTS, "fixtures")
DATA = os.path.join(TESTS, "data")
SCENARIOS = os.path.join(ROOT, "scenarios")
