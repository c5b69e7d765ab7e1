"""The results database schema (DuckDB) and its migrations.

The file is meant to be read by people too (``duckdb results.duckdb``), so tables and columns have
plain names and units in their names (``_s`` seconds, ``_ms`` milliseconds, ``_mb`` MiB).
Timestamps are UTC. JSON values are stored as VARCHAR holding JSON text (DuckDB's ``json_*``
functions read them) so reading needs no extension and CSV export stays flat.

Migrations are an append-only list: migration ``i`` (1-based) moves the file from version ``i-1``
to ``i``. Never edit a released step; add one. ``schema_version`` keeps one row per applied step.
"""

from __future__ import annotations

# Columns of `trials`, in table order, with their SQL types. The store builds its Arrow batches
# from this list, so the DDL and the ingest code cannot drift apart.
_TRIAL_COLUMNS_V1: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR NOT NULL"),
    ("device", "VARCHAR NOT NULL"),  # testbed device name (inventory)
    ("key", "VARCHAR NOT NULL"),  # TrialSpec.key: stable across runs and machines
    ("label", "VARCHAR"),
    ("model", "VARCHAR"),
    ("family", "VARCHAR"),  # resnet, efficientnet, deit, swin, convnext; block (conv, mha)
    ("compiler", "VARCHAR"),
    ("batch", "INTEGER"),
    ("depth", "INTEGER"),
    ("width", "INTEGER"),
    ("optimisation", "VARCHAR"),
    ("target", "VARCHAR"),  # cpu | cuda (TrialSpec.device)
    ("input_size", "INTEGER"),
    ("status", "VARCHAR"),  # ok | failed
    ("error", "VARCHAR"),
    ("error_kind", "VARCHAR"),
    ("export_s", "DOUBLE"),
    ("compile_s", "DOUBLE"),
    ("tune_s", "DOUBLE"),
    ("first_call_s", "DOUBLE"),
    ("repetitions", "INTEGER"),
    ("throughput_mean", "DOUBLE"),  # samples per second
    ("throughput_std", "DOUBLE"),
    ("throughput_median", "DOUBLE"),
    ("throughput_min", "DOUBLE"),
    ("throughput_max", "DOUBLE"),
    ("throughput_p50", "DOUBLE"),
    ("throughput_p90", "DOUBLE"),
    ("throughput_p99", "DOUBLE"),
    ("throughput_cov", "DOUBLE"),
    ("latency_mean_ms", "DOUBLE"),
    ("latency_p50_ms", "DOUBLE"),
    ("latency_p90_ms", "DOUBLE"),
    ("latency_p99_ms", "DOUBLE"),
    ("unstable", "BOOLEAN"),
    ("cpu_percent_mean", "DOUBLE"),
    ("cpu_percent_max", "DOUBLE"),
    ("proc_cpu_percent_mean", "DOUBLE"),
    ("peak_rss_mb", "DOUBLE"),
    ("gpu_mem_mb", "DOUBLE"),
    ("params", "BIGINT"),
    ("macs", "BIGINT"),
    ("max_abs_err", "DOUBLE"),
    ("host", "VARCHAR"),
    ("versions", "VARCHAR"),  # JSON
    ("threads", "VARCHAR"),  # JSON
    ("compiler_options", "VARCHAR"),  # JSON
    ("measure", "VARCHAR"),  # JSON (MeasureSettings)
    ("spec", "VARCHAR"),  # JSON (TrialSpec.to_dict())
    ("extra", "VARCHAR"),  # JSON
    ("started_at", "TIMESTAMP"),
    ("finished_at", "TIMESTAMP"),
    ("ingested_at", "TIMESTAMP"),
)
# Migration 2 (ngb.core.statistics.stopping / interference): how sure a trial's throughput is.
_TRIAL_COLUMNS_V2: tuple[tuple[str, str], ...] = (
    ("throughput_ci_half", "DOUBLE"),  # samples/s: half-width of the CI of the mean (95 %)
    ("verdict", "VARCHAR"),  # VALID | INVALID; NULL for failed trials and older rows
    ("verdict_reason", "VARCHAR"),
    ("disturbed", "BOOLEAN"),  # other processes took a meaningful CPU share / held the GPU
    ("workers", "INTEGER"),  # processes the repetitions came from
)
# Migration 3 (ngb.core.models.precision): the numeric precision that ran, as read back from the
# runtime.
_TRIAL_COLUMNS_V3: tuple[tuple[str, str], ...] = (
    ("precision", "VARCHAR"),  # fp32 | tf32 | bf16 | fp16 | mixes (tf32-conv); NULL: unknown/older
    ("precision_asked", "VARCHAR"),  # MeasureSettings.precision: default | fp32 | tf32 | ...
    ("precision_flags", "VARCHAR"),  # JSON: the runtime's settings read back
)
# Migration 5 (ngb.core.trial.energy): energy per inference, measured around the timed loops.
_TRIAL_COLUMNS_V5: tuple[tuple[str, str], ...] = (
    ("energy_j_per_sample", "DOUBLE"),  # joules per sample, idle included; NULL: no meter
    ("energy_j_per_sample_ci_half", "DOUBLE"),  # half-width of its CI (processes, 95 %)
    ("energy_above_idle_j_per_sample", "DOUBLE"),  # minus the idle power measured before
    ("samples_per_j", "DOUBLE"),
    ("power_w_mean", "DOUBLE"),  # watts during the timed loops
    ("idle_power_w", "DOUBLE"),  # watts before the warm-up
    ("energy_source", "VARCHAR"),  # rapl | nvml-energy | nvml-power | jetson-ina3221 ...
    ("energy_note", "VARCHAR"),  # "no power meter: ..." or how the source measured
)
# Migration 6 (ngb.core.trial.provenance, issue 35): what else may explain a change between runs.
_TRIAL_COLUMNS_V6: tuple[tuple[str, str], ...] = (
    ("env_hash", "VARCHAR"),  # sha of the sorted package list; the list is in `environments`
    ("kernel", "VARCHAR"),
    ("container_image", "VARCHAR"),  # "runtime image" (digest where known); NULL: no container
    ("model_git_commit", "VARCHAR"),  # the user's model code, read on the workstation
    ("model_git_dirty", "BOOLEAN"),
)
# Migration 7 (ngb.core.statistics.percentiles, ngb.core.trial.memory; issue 30): tails with their
# own interval, memory of every runtime per phase.
_TRIAL_COLUMNS_V7: tuple[tuple[str, str], ...] = (
    ("latency_calls", "BIGINT"),  # timed calls the percentiles are over
    # order-statistic 95 % bounds (ms); NULL where too few calls bound that side: a NULL upper
    # bound means the percentile is not claimed (p99 needs 368 calls)
    ("latency_p50_lo_ms", "DOUBLE"),
    ("latency_p50_hi_ms", "DOUBLE"),
    ("latency_p90_lo_ms", "DOUBLE"),
    ("latency_p90_hi_ms", "DOUBLE"),
    ("latency_p99_lo_ms", "DOUBLE"),
    ("latency_p99_hi_ms", "DOUBLE"),
    ("latency_kept_every", "INTEGER"),  # `latencies` holds every k-th call (1: all of them)
    ("gpu_mem_source", "VARCHAR"),  # nvml-process | nvml-device-delta | torch-allocator
    ("peak_rss_compile_mb", "DOUBLE"),  # build + reference + compile
    ("peak_rss_warmup_mb", "DOUBLE"),  # first call + warm-up
    ("peak_rss_timed_mb", "DOUBLE"),  # the timed loops
    ("rss_source", "VARCHAR"),  # vmhwm-per-phase | ru_maxrss-cumulative (includes earlier phases)
)
# Migration 13 (ngb.core.trial.accuracy_pass, issue 42): the compiled model over a labelled set,
# beside eager fp32 on the same inputs. Fractions 0..1; _lo/_hi the 95 % bounds (Wilson's for the
# proportions, the exact conditional interval for the drop); NULL where no accuracy was asked.
_TRIAL_COLUMNS_V13: tuple[tuple[str, str], ...] = (
    ("accuracy_data", "VARCHAR"),  # the data reference: digits, a file, module:loader
    ("accuracy_samples", "INTEGER"),
    ("accuracy_classes", "INTEGER"),
    ("top1", "DOUBLE"),  # the compiled model's top-1 accuracy
    ("top1_lo", "DOUBLE"),
    ("top1_hi", "DOUBLE"),
    ("top5", "DOUBLE"),  # NULL at 5 classes or fewer
    ("top5_lo", "DOUBLE"),
    ("top5_hi", "DOUBLE"),
    ("eager_top1", "DOUBLE"),  # eager fp32 on the same inputs: the baseline
    ("eager_top1_lo", "DOUBLE"),
    ("eager_top1_hi", "DOUBLE"),
    ("agreement", "DOUBLE"),  # share of samples whose top-1 equals eager's
    ("agreement_lo", "DOUBLE"),
    ("agreement_hi", "DOUBLE"),
    ("accuracy_drop", "DOUBLE"),  # eager top-1 - compiled top-1 (positive: worse)
    ("accuracy_drop_lo", "DOUBLE"),
    ("accuracy_drop_hi", "DOUBLE"),
    ("accuracy_p", "DOUBLE"),  # McNemar's exact test of the paired correctness
    ("accuracy_verdict", "VARCHAR"),  # n.s. | drop | gain
    ("accuracy_pass_s", "DOUBLE"),  # seconds of the whole pass (data, eager, compiled)
    ("accuracy_error", "VARCHAR"),  # why a pass that was asked for did not run
)
# Migration 14 (ngb.core.models.algorithms, issue 48): the convolution primitive a trial ran
# (default, direct, gemm, sparse-csr, sparse-bsr-B). NULL in rows stored before it: those ran the
# compiler's own choice, read as 'default' (``coalesce(algorithm, 'default')``).
_TRIAL_COLUMNS_V14: tuple[tuple[str, str], ...] = (("algorithm", "VARCHAR"),)
LATENCY_COLUMNS = (
    ("run_id", "VARCHAR NOT NULL"),
    ("device", "VARCHAR NOT NULL"),
    ("key", "VARCHAR NOT NULL"),
    ("call", "BIGINT NOT NULL"),  # 0-based index among the trial's timed calls, in call order
    ("latency_ms", "DOUBLE"),
)
TRIAL_COLUMNS = (
    _TRIAL_COLUMNS_V1
    + _TRIAL_COLUMNS_V2
    + _TRIAL_COLUMNS_V3
    + _TRIAL_COLUMNS_V5
    + _TRIAL_COLUMNS_V6
    + _TRIAL_COLUMNS_V7
    + _TRIAL_COLUMNS_V13
    + _TRIAL_COLUMNS_V14
)

# One row per timed repetition. The trial's axes are repeated here (DuckDB stores them
# dictionary-compressed, almost free) so the common aggregates -- throughput by compiler and batch
# over millions of repetitions -- need no join and the table reads on its own in the duckdb CLI.
_MEASUREMENT_COLUMNS_V1 = (
    ("run_id", "VARCHAR NOT NULL"),
    ("device", "VARCHAR NOT NULL"),
    ("key", "VARCHAR NOT NULL"),
    ("model", "VARCHAR"),
    ("compiler", "VARCHAR"),
    ("batch", "INTEGER"),
    ("depth", "INTEGER"),
    ("width", "INTEGER"),
    ("optimisation", "VARCHAR"),
    ("rep", "INTEGER NOT NULL"),  # 0-based repetition index
    ("iters", "BIGINT"),
    ("elapsed_s", "DOUBLE"),
    ("throughput", "DOUBLE"),  # samples per second in this repetition
)
MEASUREMENT_COLUMNS = (
    *_MEASUREMENT_COLUMNS_V1,
    ("worker", "INTEGER"),  # migration 2: the worker process (0 = the trial's own)
)

CPU_SAMPLE_COLUMNS = (
    ("run_id", "VARCHAR NOT NULL"),
    ("device", "VARCHAR NOT NULL"),
    ("key", "VARCHAR"),
    ("source", "VARCHAR"),  # trial: from the finished result; live: from the event stream
    ("ts", "TIMESTAMP"),  # absolute time where known
    ("t_s", "DOUBLE"),  # offset from the start of the timed loop (trial samples)
    ("sys_percent", "DOUBLE"),  # system-wide, 0..100
    ("proc_percent", "DOUBLE"),  # the benchmark process, 100 per busy core
)


def _ddl(table: str, columns: tuple[tuple[str, str], ...], extra: str = "") -> str:
    body = ",\n  ".join(f"{name} {typ}" for name, typ in columns)
    return f"CREATE TABLE {table} (\n  {body}{extra}\n)"


_V1 = [
    """CREATE TABLE devices (
  name VARCHAR PRIMARY KEY,
  host VARCHAR,
  port INTEGER,
  "user" VARCHAR,
  jump_host VARCHAR,
  python VARCHAR,
  workdir VARCHAR,
  groups VARCHAR,   -- JSON list
  notes VARCHAR,
  extra VARCHAR,    -- JSON: other inventory fields (never key material or passwords)
  updated_at TIMESTAMP
)""",
    """CREATE TABLE probes (
  device VARCHAR NOT NULL,
  probed_at TIMESTAMP NOT NULL,
  hostname VARCHAR,
  cpu_model VARCHAR,
  cpu_cores INTEGER,
  ram_gb DOUBLE,
  gpu VARCHAR,
  os VARCHAR,
  python VARCHAR,
  compilers VARCHAR,  -- JSON: which compilers are available there
  versions VARCHAR,   -- JSON: library versions
  probe VARCHAR       -- JSON: the whole probe answer
)""",
    """CREATE TABLE runs (
  run_id VARCHAR PRIMARY KEY,
  sweep_name VARCHAR,
  sweep_toml VARCHAR,
  devices VARCHAR,    -- JSON list of device names
  n_trials INTEGER,   -- trials per device
  status VARCHAR,     -- created | running | done | failed | cancelled ...
  created_at TIMESTAMP,
  updated_at TIMESTAMP,
  finished_at TIMESTAMP,
  meta VARCHAR        -- JSON
)""",
    """CREATE TABLE run_devices (
  run_id VARCHAR NOT NULL,
  device VARCHAR NOT NULL,
  state VARCHAR,
  workdir VARCHAR,    -- remote work directory on the device
  n_trials INTEGER,
  n_done INTEGER,
  n_failed INTEGER,
  n_skipped INTEGER,
  message VARCHAR,
  started_at TIMESTAMP,
  finished_at TIMESTAMP,
  updated_at TIMESTAMP,
  extra VARCHAR,      -- JSON: further fields the orchestrator records
  PRIMARY KEY (run_id, device)
)""",
    # (run_id, device, key) is unique, but enforced by the store's ingest (an anti-join inside
    # the writer's transaction; DuckDB admits one writer process) rather than a PRIMARY KEY:
    # the key index cost ~40 % of ingest time and grows with every stored trial.
    _ddl("trials", _TRIAL_COLUMNS_V1),
    _ddl("measurements", _MEASUREMENT_COLUMNS_V1),
    _ddl("cpu_samples", CPU_SAMPLE_COLUMNS),
    """CREATE TABLE tuning_progress (
  run_id VARCHAR NOT NULL,
  device VARCHAR NOT NULL,
  key VARCHAR NOT NULL,
  ts TIMESTAMP,
  trials_done INTEGER,
  budget INTEGER,
  best_ms DOUBLE,
  tasks VARCHAR       -- JSON list of {name, trials, best_ms}
)""",
    """CREATE TABLE errors (
  run_id VARCHAR,
  device VARCHAR,
  key VARCHAR,        -- NULL for connection-level errors
  ts TIMESTAMP,
  kind VARCHAR,       -- connection | transport | agent | trial kinds (oom, crash, timeout ...)
  message VARCHAR
)""",
    # Successful trials, the table most charts and reports start from.
    """CREATE VIEW results AS
SELECT run_id, device, model, family, compiler, optimisation, batch, depth, width, target,
       throughput_mean, throughput_std, throughput_median, throughput_cov, unstable,
       latency_p50_ms, latency_p99_ms, compile_s, export_s, tune_s, first_call_s,
       cpu_percent_mean, peak_rss_mb, params, macs, max_abs_err, host, key, finished_at
FROM trials WHERE status = 'ok'""",
    # Progress of each run on each device, counted from what actually reached the database.
    """CREATE VIEW run_progress AS
SELECT r.run_id, r.sweep_name, r.status AS run_status, d.device, d.state, d.n_trials,
       count(t.key) FILTER (WHERE t.status = 'ok') AS ok,
       count(t.key) FILTER (WHERE t.status <> 'ok') AS failed,
       d.started_at, d.finished_at
FROM runs r JOIN run_devices d USING (run_id)
LEFT JOIN trials t ON t.run_id = d.run_id AND t.device = d.device
GROUP BY ALL""",
    # Failed trials with their reasons, newest first when ordered by finished_at.
    """CREATE VIEW failures AS
SELECT run_id, device, model, compiler, batch, depth, width, error_kind, error, finished_at, key
FROM trials WHERE status <> 'ok'""",
]

# Append-only. Each entry: (description, statements).
_V2 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V2),
    "ALTER TABLE measurements ADD COLUMN worker INTEGER",
    """CREATE OR REPLACE VIEW results AS
SELECT run_id, device, model, family, compiler, optimisation, batch, depth, width, target,
       throughput_mean, throughput_std, throughput_median, throughput_cov, unstable,
       latency_p50_ms, latency_p99_ms, compile_s, export_s, tune_s, first_call_s,
       cpu_percent_mean, peak_rss_mb, params, macs, max_abs_err, host, key, finished_at,
       throughput_ci_half, verdict, verdict_reason, disturbed, workers
FROM trials WHERE status = 'ok'""",
]

_V3 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V3),
    # Rows stored before the column existed ran at each vendor's default.
    "UPDATE trials SET precision_asked = 'default' WHERE precision_asked IS NULL",
    """CREATE OR REPLACE VIEW results AS
SELECT run_id, device, model, family, compiler, optimisation, batch, depth, width, target,
       throughput_mean, throughput_std, throughput_median, throughput_cov, unstable,
       latency_p50_ms, latency_p99_ms, compile_s, export_s, tune_s, first_call_s,
       cpu_percent_mean, peak_rss_mb, params, macs, max_abs_err, host, key, finished_at,
       throughput_ci_half, verdict, verdict_reason, disturbed, workers,
       precision, precision_asked
FROM trials WHERE status = 'ok'""",
]

# Every trial, failed ones too, with its status and error: a user looking for a missing model in
# `results` finds it with the reason it failed (issue 20); `WHERE status = 'ok'` gives the old view.
# Migration 5 extends the same select with the energy columns.
_RESULTS_V4_SELECT = """\
SELECT run_id, device, model, family, compiler, optimisation, batch, depth, width, target,
       status, error_kind, error,
       throughput_mean, throughput_std, throughput_median, throughput_cov, unstable,
       latency_p50_ms, latency_p99_ms, compile_s, export_s, tune_s, first_call_s,
       cpu_percent_mean, peak_rss_mb, params, macs, max_abs_err, host, key, finished_at,
       throughput_ci_half, verdict, verdict_reason, disturbed, workers,
       precision, precision_asked"""
_V4 = [f"CREATE OR REPLACE VIEW results AS\n{_RESULTS_V4_SELECT}\nFROM trials"]

_V5 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V5),
    f"""CREATE OR REPLACE VIEW results AS
{_RESULTS_V4_SELECT},
       energy_j_per_sample, energy_j_per_sample_ci_half, energy_above_idle_j_per_sample,
       samples_per_j, power_w_mean, idle_power_w, energy_source, energy_note
FROM trials""",
]

_V6 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V6),
    # one row per distinct environment: 1000 trials in one venv store the list once
    """CREATE TABLE IF NOT EXISTS environments (
  env_hash VARCHAR PRIMARY KEY,
  packages VARCHAR,   -- JSON list of "name==version", sorted
  first_seen TIMESTAMP
)""",
]

_V7 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V7),
    # per-call latencies of each trial (every call, or a systematic 1-in-k sample beyond 4096)
    _ddl("latencies", LATENCY_COLUMNS),
]

# per-operator profiles (ngb.core.compilers.profiling): one row per profile pass, one per kernel
# record
PROFILE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"), ("device", "VARCHAR"), ("model", "VARCHAR"), ("width", "INTEGER"),
    ("depth", "INTEGER"), ("batch", "INTEGER"), ("compiler", "VARCHAR"), ("precision", "VARCHAR"),
    ("profiler", "VARCHAR"), ("calls", "INTEGER"), ("plain_ms", "DOUBLE"),
    ("profiled_ms", "DOUBLE"), ("created_at", "TIMESTAMP"),
)  # fmt: skip
PROFILE_KERNEL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"), ("device", "VARCHAR"), ("model", "VARCHAR"), ("width", "INTEGER"),
    ("depth", "INTEGER"), ("batch", "INTEGER"), ("compiler", "VARCHAR"), ("precision", "VARCHAR"),
    ("name", "VARCHAR"), ("op_type", "VARCHAR"), ("op_class", "VARCHAR"), ("fused", "BOOLEAN"),
    ("us_per_inference", "DOUBLE"), ("calls_per_inference", "DOUBLE"),
    ("source_ops", "VARCHAR"), ("kernel", "VARCHAR"),
)  # fmt: skip

_V8 = [_ddl("profiles", PROFILE_COLUMNS), _ddl("profile_kernels", PROFILE_KERNEL_COLUMNS)]

# a sweep's profile pass (MeasureSettings.profile): the trial it followed and its timed latency;
# the optimisation makes DLAS rows (int8, pruning) distinct points
PROFILE_COLUMNS_V9: tuple[tuple[str, str], ...] = (
    ("optimisation", "VARCHAR"), ("key", "VARCHAR"), ("timed_ms", "DOUBLE"),
)  # fmt: skip
PROFILE_KERNEL_COLUMNS_V9 = PROFILE_COLUMNS_V9[:2]
_V9 = [
    *(f"ALTER TABLE profiles ADD COLUMN {n} {t}" for n, t in PROFILE_COLUMNS_V9),
    *(f"ALTER TABLE profile_kernels ADD COLUMN {n} {t}" for n, t in PROFILE_KERNEL_COLUMNS_V9),
]

# A Slurm slot's results are stored under the node that ran them (``node@partition``), with the
# slot in ``extra.run_device``: count them for the slot's row, as ``resumed_run`` does (issue 41:
# `ngb status` showed 0 done for every Slurm run).
_V10 = [
    """CREATE OR REPLACE VIEW run_progress AS
SELECT r.run_id, r.sweep_name, r.status AS run_status, d.device, d.state, d.n_trials,
       count(t.key) FILTER (WHERE t.status = 'ok') AS ok,
       count(t.key) FILTER (WHERE t.status <> 'ok') AS failed,
       d.started_at, d.finished_at
FROM runs r JOIN run_devices d USING (run_id)
LEFT JOIN trials t ON t.run_id = d.run_id AND d.device = CASE
    WHEN t.device LIKE '%@%'
    THEN coalesce(json_extract_string(t.extra, '$.run_device'), t.device)
    ELSE t.device END
GROUP BY ALL""",
]

# Serving runs (``ngb serve``, issue 43): one ``serving`` row per run at one offered rate (a
# single run, or one probe of a peak search) with its latency percentiles from the scheduled
# time and their 95 % bounds, and one ``serving_peaks`` row per peak search (QPS* and its
# interval). A point's columns are the trials' (``POINT_COLUMNS`` less input_size), so
# ``ngb advise`` finds the server-scenario p99 of the configuration it ranks.
_SERVING_POINT: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR NOT NULL"), ("device", "VARCHAR NOT NULL"),
    # not ``key``: a serving run is no trial, so ``ngb import`` merges its rows by run
    ("serve_key", "VARCHAR NOT NULL"), ("label", "VARCHAR"), ("model", "VARCHAR"),
    ("width", "INTEGER"), ("depth", "INTEGER"), ("batch", "INTEGER"), ("compiler", "VARCHAR"),
    ("precision", "VARCHAR"), ("optimisation", "VARCHAR"), ("target", "VARCHAR"),
    ("scenario", "VARCHAR"),
)  # fmt: skip
SERVING_COLUMNS: tuple[tuple[str, str], ...] = _SERVING_POINT + (
    ("probe", "INTEGER"),  # index within a peak search; NULL for a single run
    ("phase", "VARCHAR"),  # a probe's: bracket | bisect | boundary
    ("target_qps", "DOUBLE"), ("offered_qps", "DOUBLE"), ("issued_qps", "DOUBLE"),
    ("completed_qps", "DOUBLE"), ("duration_s", "DOUBLE"), ("requests", "BIGINT"),
    ("concurrency", "INTEGER"), ("max_batch", "INTEGER"), ("max_queue_delay_ms", "DOUBLE"),
    ("mean_batch", "DOUBLE"), ("burstiness", "DOUBLE"), ("seed", "BIGINT"),
    *(
        (f"latency_{p}{side}_ms", "DOUBLE")
        for p in ("p50", "p90", "p99")
        for side in ("", "_lo", "_hi")
    ),
    ("issue_lag_p50_ms", "DOUBLE"), ("issue_lag_p99_ms", "DOUBLE"),
    ("loadgen_cpu_percent", "DOUBLE"), ("process_cpu_percent", "DOUBLE"),
    ("limit_ms", "DOUBLE"), ("over_limit", "BIGINT"), ("needed", "BIGINT"), ("meets", "BOOLEAN"),
    ("verdict", "VARCHAR"), ("verdict_reason", "VARCHAR"), ("host", "VARCHAR"),
    ("extra", "VARCHAR"),  # JSON: the summary and settings as ``ngb serve --json`` prints them
    ("created_at", "TIMESTAMP"),
)  # fmt: skip
SERVING_PEAK_COLUMNS: tuple[tuple[str, str], ...] = _SERVING_POINT + (
    ("limit_ms", "DOUBLE"), ("q", "DOUBLE"), ("peak_qps", "DOUBLE"), ("peak_low", "DOUBLE"),
    ("peak_high", "DOUBLE"), ("method", "VARCHAR"), ("verified_qps", "DOUBLE"),
    ("probes", "INTEGER"), ("search_s", "DOUBLE"), ("capacity_qps", "DOUBLE"),
    ("host", "VARCHAR"), ("extra", "VARCHAR"), ("created_at", "TIMESTAMP"),
)  # fmt: skip
SERVING_MIGRATION = "serving runs from the scheduled time and peak searches (ngb serve)"
_SERVING = [_ddl("serving", SERVING_COLUMNS), _ddl("serving_peaks", SERVING_PEAK_COLUMNS)]

# A user's model measured with ``ngb measure`` or ``ngb.measure`` was stored under the path typed
# (``examples/own-models/tiny_cnn.onnx``, an absolute ``/home/me/resmlp.py:build``): each working
# directory made another series in ``ngb history`` (issue 45). Now it is stored under its own
# name (``core.model_sources.default_name``: the file's name, with the factory for python), and
# the rows stored before are renamed the same way. A name with a '/' can only be a typed path (a
# ``[[models]]`` name cannot hold one), and the source's ``ref`` is the file's path relative to
# its code folder, so its last part is that name. The trial keys stay: they identify what ran.
_OWN_MODEL_NAMES = [
    """UPDATE trials
SET model = regexp_replace(json_extract_string(spec, '$.source.ref'), '^.*/', '')
WHERE json_extract_string(spec, '$.source.kind') IN ('onnx', 'pt2', 'python')
  AND contains(model, '/')""",
    """UPDATE profiles SET model = t.model FROM trials AS t
WHERE profiles.run_id = t.run_id AND profiles.device = t.device AND profiles.key = t.key
  AND contains(profiles.model, '/')""",
    """UPDATE profile_kernels SET model = t.model FROM trials AS t
WHERE profile_kernels.run_id = t.run_id AND profile_kernels.device = t.device
  AND profile_kernels.key = t.key AND contains(profile_kernels.model, '/')""",
]
OWN_MODEL_NAMES_MIGRATION = "a user's model named by its own file, not the path typed"

_V13 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V13),
    f"""CREATE OR REPLACE VIEW results AS
{_RESULTS_V4_SELECT},
       energy_j_per_sample, energy_j_per_sample_ci_half, energy_above_idle_j_per_sample,
       samples_per_j, power_w_mean, idle_power_w, energy_source, energy_note,
       accuracy_data, top1, top1_lo, top1_hi, top5, eager_top1, agreement, accuracy_drop,
       accuracy_drop_lo, accuracy_drop_hi, accuracy_verdict
FROM trials""",
]

# the results view names the algorithm beside the optimisation it is read with; 'default' for
# the rows stored before it
_RESULTS_V14_SELECT = _RESULTS_V4_SELECT.replace(
    "compiler, optimisation,",
    "compiler, optimisation, coalesce(algorithm, 'default') AS algorithm,",
)
ALGORITHM_MIGRATION = "the convolution algorithm a trial ran (default, gemm, sparse, ...)"
_V14 = [
    *(f"ALTER TABLE trials ADD COLUMN {name} {typ}" for name, typ in _TRIAL_COLUMNS_V14),
    f"""CREATE OR REPLACE VIEW results AS
{_RESULTS_V14_SELECT},
       energy_j_per_sample, energy_j_per_sample_ci_half, energy_above_idle_j_per_sample,
       samples_per_j, power_w_mean, idle_power_w, energy_source, energy_note,
       accuracy_data, top1, top1_lo, top1_hi, top5, eager_top1, agreement, accuracy_drop,
       accuracy_drop_lo, accuracy_drop_hi, accuracy_verdict
FROM trials""",
]

# A served trial (``[serve]`` in a sweep) stores ``serving`` rows, no ``trials`` row, each naming
# its trial (``extra.trial_key``, and the slot a Slurm node ran it for): count it done too, or
# ``ngb status`` reads 0 done for a served sweep that finished (issue 43). A failed served trial
# is an ordinary failed ``trials`` row.
SERVED_PROGRESS_MIGRATION = "run_progress counts served trials (their serving rows) as done"
_V15 = [
    """CREATE OR REPLACE VIEW run_progress AS
WITH done AS (
    SELECT run_id, device, key, status, extra FROM trials
    UNION ALL
    SELECT DISTINCT run_id, device, json_extract_string(extra, '$.trial_key') AS key,
           'ok' AS status,
           json_object('run_device', json_extract_string(extra, '$.run_device')) AS extra
    FROM serving WHERE json_extract_string(extra, '$.trial_key') IS NOT NULL
)
SELECT r.run_id, r.sweep_name, r.status AS run_status, d.device, d.state, d.n_trials,
       count(t.key) FILTER (WHERE t.status = 'ok') AS ok,
       count(t.key) FILTER (WHERE t.status <> 'ok') AS failed,
       d.started_at, d.finished_at
FROM runs r JOIN run_devices d USING (run_id)
LEFT JOIN done t ON t.run_id = d.run_id AND d.device = CASE
    WHEN t.device LIKE '%@%'
    THEN coalesce(json_extract_string(t.extra, '$.run_device'), t.device)
    ELSE t.device END
GROUP BY ALL""",
]

MIGRATIONS: list[tuple[str, list[str]]] = [
    ("initial schema", _V1),
    ("trial CI half-width, verdict, disturbed flag, workers; worker per repetition", _V2),
    ("precision that ran, precision asked for, precision flags read back", _V3),
    ("results view: every trial with its status and error", _V4),
    ("energy per sample with its interval, samples per joule, mean and idle watts", _V5),
    ("provenance: environment hash and package lists, kernel, container, model git", _V6),
    ("latency percentiles with bounds, kept per-call latencies; memory per phase, sources", _V7),
    ("per-operator profiles: one row per profile pass and per kernel", _V8),
    ("profiles keyed to the trial they followed, its timed latency, the optimisation", _V9),
    ("run_progress counts a Slurm slot's results stored under their node", _V10),
    (SERVING_MIGRATION, _SERVING),
    (OWN_MODEL_NAMES_MIGRATION, _OWN_MODEL_NAMES),
    ("accuracy of the compiled model on labelled data beside eager's, agreement, McNemar", _V13),
    (ALGORITHM_MIGRATION, _V14),
    (SERVED_PROGRESS_MIGRATION, _V15),
]


def latest_version() -> int:
    return len(MIGRATIONS)


VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
  version INTEGER PRIMARY KEY,
  description VARCHAR,
  applied_at TIMESTAMP
)"""
