"""Log levels and the three platform hooks (log sink, clock, abort) an embedding application overrides."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import etc
from etc.errors import EtcError
from etc.runtime import Runtime, log


@pytest.fixture(autouse=True)
def restore_log_state():
    level = log.get_log_level()
    pal = log.get_pal()
    yield
    log.set_log_level(level)
    log.reset_pal(pal)


def _program():
    class AddRelu(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x + 1)

    return etc.to_edge(torch.export.export(AddRelu(), (torch.ones(4),))).to_executorch().buffer


def test_levels_filter_what_reaches_the_sink():
    records = []
    log.set_pal(log_sink=records.append)
    log.set_log_level("error")
    log.debug("d")
    log.info("i")
    log.error("e")
    assert [(r.level, r.message) for r in records] == [(log.LogLevel.ERROR, "e")]
    assert log.set_log_level(log.LogLevel.DEBUG) == log.LogLevel.ERROR
    log.debug("d2")
    assert records[-1].level == log.LogLevel.DEBUG and records[-1].format().startswith("D ")
    with pytest.raises(EtcError, match="unknown log level 'loud'.*debug, info, error, fatal"):
        log.set_log_level("loud")


def test_the_runtime_logs_its_load_details_at_debug():
    records = []
    log.set_pal(log_sink=records.append)
    log.set_log_level("info")
    Runtime.get().load_program(_program()).load_method("forward")
    assert records == []  # nothing at info: loading is silent by default
    log.set_log_level("debug")
    Runtime.get().load_program(_program()).load_method("forward")
    messages = [r.message for r in records]
    assert any(m.startswith("loaded program") for m in messages)
    assert any("loaded method 'forward'" in m and "operator(s)" in m for m in messages)
    assert all(r.source == "etc.runtime" for r in records)


def test_delegate_initialisation_is_logged_with_its_time():
    from etc.runtime import Backend, register_backend, unregister_backend
    from etc.schema import program as S

    class Echo(Backend):
        backend_id = "etc_log_test_echo"

        def init(self, blob, compile_specs):
            return None

        def execute(self, handle, args):
            return None

    pte = S.PteFile(program=S.Program(version=0, execution_plan=[S.ExecutionPlan(
        name="forward", values=[], inputs=[], outputs=[], chains=[S.Chain(inputs=[], outputs=[], instructions=[])],
        operators=[], delegates=[S.BackendDelegate(id="etc_log_test_echo", processed=S.BackendDelegateDataReference(
            location=S.DataLocation.INLINE, index=0), compile_specs=[])], non_const_buffer_sizes=[0])],
        constant_buffer=[], backend_delegate_data=[S.BackendDelegateInlineData(data=b"abc")], segments=[]))
    records = []
    log.set_pal(log_sink=records.append)
    log.set_log_level("debug")
    register_backend(Echo())
    try:
        Runtime.get().load_program(pte).load_method("forward")
    finally:
        unregister_backend("etc_log_test_echo")
    assert any("delegate 0 initialised on backend 'etc_log_test_echo' (3-byte blob) in" in r.message
               for r in records)


def test_the_environment_variable_sets_the_initial_level():
    code = "from etc.runtime import log; print(log.get_log_level().name)"
    env = dict(os.environ, ETC_LOG_LEVEL="Error")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ERROR"
    env["ETC_LOG_LEVEL"] = "chatty"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "ETC_LOG_LEVEL: unknown log level 'chatty'" in bad.stderr


def test_the_default_sink_writes_one_line_to_stderr(capsys):
    log.reset_pal()
    log.set_log_level("info")
    log.info("hello from a test", source="etc.test")
    err = capsys.readouterr().err
    assert err.startswith("I ") and err.rstrip().endswith("etc.test] hello from a test")


def test_the_clock_hook_times_the_run_record_and_profile():
    ticks = iter(range(0, 10**9, 1000))
    log.set_pal(clock=lambda: next(ticks))
    program = Runtime.get().load_program(_program(), enable_etdump=True)
    program.load_method("forward").execute([np.ones(4, np.float32)])
    events = program.run_record.events
    assert events and all(e.duration_ns % 1000 == 0 and e.duration_ns > 0 for e in events)
    execute = [e for e in events if e.is_execute]
    # start, inputs copied, start/end of each instruction, outputs start, end: 2 per event but the execute's
    # start, which the input copy shares, and its end, which the output copy shares.
    assert len(execute) == 1 and execute[0].duration_ns == 1000 * (2 * len(events) - 3)
    rows = Runtime.get().load_program(_program()).load_method("forward").profile([np.ones(4, np.float32)])
    assert all(seconds == pytest.approx(1e-6) for _, _, seconds, _ in rows)


def test_fatal_logs_then_calls_the_abort_hook():
    records, aborted = [], []

    class Stop(Exception):
        pass

    def abort(message):
        aborted.append(message)
        raise Stop

    log.set_pal(log_sink=records.append, abort=abort)
    log.set_log_level("fatal")
    with pytest.raises(Stop):
        log.fatal("arena corrupted")
    assert aborted == ["arena corrupted"] and records[0].level == log.LogLevel.FATAL
    log.reset_pal()
    log.set_pal(log_sink=lambda record: None)
    with pytest.raises(log.FatalError, match="arena corrupted"):  # the default hook raises, never exits
        log.fatal("arena corrupted")
    log.set_pal(abort=lambda message: None)
    with pytest.raises(log.FatalError, match="abort hook returned"):
        log.fatal("x")
    with pytest.raises(EtcError, match="clock must be callable"):
        log.set_pal(clock=42)


def test_a_builtin_backend_that_fails_to_load_is_logged_once(monkeypatch):
    from etc.runtime import backends

    records = []
    log.set_pal(log_sink=records.append)
    monkeypatch.setitem(backends.BUILTIN_BACKENDS, "etc_log_test_broken", "etc.no_such_module_for_log_test")
    monkeypatch.setattr(backends, "REPORTED_LOAD_FAILURES", set())
    assert not backends.is_available("etc_log_test_broken")
    assert not backends.is_available("etc_log_test_broken")
    assert len(records) == 1 and records[0].level == log.LogLevel.ERROR
    assert "built-in backend 'etc_log_test_broken' failed to load" in records[0].message
