"""How a host program that gave no result is reported: exit status, signal, where it crashed."""
import subprocess
import sys

from testbed.runtime.launch import why


def test_an_exit_status_comes_with_the_last_line_of_stderr():
    assert why(1, "Traceback ...\nValueError: bad size\n") == "exited 1: ValueError: bad size"
    assert why(2, "") == "exited 2: no output"


def test_a_kill_is_named():
    assert why(-9, "") == "was killed: no output"


def test_a_crash_names_the_signal_and_where_the_crashing_thread_was(tmp_path):
    prog = tmp_path / "crash.py"
    prog.write_text("import ctypes, threading, time\n"
                    "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
                    "def crash():\n"
                    "    ctypes.string_at(0)\n"
                    "crash()\n")
    p = subprocess.run([sys.executable, "-X", "faulthandler", str(prog)], capture_output=True, text=True)
    assert p.returncode == -11
    said = why(p.returncode, p.stderr)
    assert said.startswith("died of SIGSEGV in ") and "crash.py:4 crash < crash.py:5 <module>" in said, said
    assert "sleep" not in said          # the other thread's frames are not the crash's


def test_a_signal_without_a_dump_is_still_named():
    assert why(-6, "") == "died of SIGABRT"
