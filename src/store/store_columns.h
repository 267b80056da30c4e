/* store_columns.h - the column lists both store implementations read and
 * write, in the order of their bind_* and read_* functions. The tables
 * have the same column names on SQLite and PostgreSQL (which is also what
 * lets `alallo store copy` move rows by name). Internal to src/store/. */
#ifndef ALALLO_STORE_COLUMNS_H
#define ALALLO_STORE_COLUMNS_H

#define JOB_COLS                                                                                   \
    "id, account, name, model, training_file, validation_file, method, precision, goal, "         \
    "adapter, suffix, n_epochs, batch_size, lr_multiplier, seed, examples, tokens, "              \
    "memory_bytes, max_steps, steps_done, status, message, estimate, price_charged, "             \
    "price_refunded, fine_tuned_model, created, started, finished, metadata, fence, "             \
    "active_attempt, stop_reason, running_ms, run_started_ms, run_start_step, train_loss, "       \
    "trained_tokens, log_seq, event_seq, internal_failure, est_low_s, est_high_s, "               \
    "est_train_low_s, est_train_high_s, est_price_high, plan, ledger_state, first_loss, hyper"
#define JOB_NCOLS 50
#define JOB_SELECT "SELECT seq, " JOB_COLS " FROM jobs "
#define ATT_COLS                                                                                   \
    "id, job, worker, fence, status, start_step, end_step, reason, price_per_hour, started, "      \
    "ended, run_ms, events_applied, t_started, t_last, token_hash, engine_id, engine_state, "     \
    "engine_reason, engine_running, heartbeat, node, resume_from"
#define FILE_COLS                                                                                  \
    "id, account, filename, bytes, purpose, examples, text_bytes, path, created, format"
#define WORKER_COLS                                                                                \
    "name, resources, cpus, mem_bytes, class, price_per_hour, state, last_heartbeat, speed, "     \
    "tokens_per_s, flops, registered"
#define LEDGER_COLS                                                                                \
    "seq, account, job, attempt, kind, amount, steps, created, from_step, to_step, reason"
#define CALIB_COLS                                                                                 \
    "kind, method, class, waited, goal, actual_a, nominal_a, actual_b, nominal_b, created, model"
#define WAITING_COLS                                                                               \
    "id, account, model, status, message, stop_reason, active_attempt, created, memory_bytes,"     \
    " tokens, examples, max_steps, steps_done, n_epochs, batch_size, plan, est_high_s"
#define EVENT_COLS "job, seq, created, level, type, message, data"
#define CHECKPOINT_COLS "job, step, path, train_loss, created, metrics"
#define WH_COLS "id, account, url, events, secret, created"
#define DLV_COLS                                                                                   \
    "seq, event_id, webhook, account, job, type, body, attempts, next_try, last_status, "        \
    "last_answer, state, created, delivered"

/* The due deliveries (store_delivery_due), NOW and CAP the placeholders of
 * the backend. Each is the oldest pending delivery of its (webhook, job)
 * whose time has come, from two bounded sets: the CAP oldest such
 * deliveries (the old order, for throughput) and each endpoint's oldest
 * pending delivery (one index step each: deliveries_heads), so that no
 * backlog, however long, hides another endpoint's. They come in turns: by
 * their rank within their account (ar), the account's endpoints taking
 * turns (wr, the rank within the webhook), then by age
 * (docs/security.md, "Webhooks"). */
#define DLV_DUE_SQL(NOW, CAP)                                                                      \
    "SELECT " DLV_COLS " FROM (SELECT d.*, row_number() OVER"                                      \
    " (PARTITION BY account ORDER BY wr, seq) AS ar FROM (SELECT d.*,"                             \
    " row_number() OVER (PARTITION BY webhook ORDER BY seq) AS wr"                                 \
    " FROM deliveries d WHERE d.next_try <= " NOW " AND d.seq IN ("                                \
    "SELECT seq FROM (SELECT o.seq FROM deliveries o WHERE o.state = 0"                            \
    " AND o.next_try <= " NOW " AND NOT EXISTS (SELECT 1 FROM deliveries p"                        \
    " WHERE p.state = 0 AND p.webhook = o.webhook AND p.job = o.job AND p.seq < o.seq)"            \
    " ORDER BY o.seq LIMIT " CAP ") g UNION SELECT (SELECT min(h.seq) FROM deliveries h"           \
    " WHERE h.webhook = w.id AND h.state = 0) FROM webhooks w)) d) d"                              \
    " ORDER BY ar, seq LIMIT " CAP

#endif
