//! The integration tests, as one crate: one binary to build and link instead of one per file.
//! Each module is one area (its file says what it proves); `support` holds what they share:
//! loopback receivers, an SMTP server, promtool, a TCP proxy, both-backends store fixtures, and
//! the `eventually` and tool-tier helpers.

mod support;

mod adaptive_day;
mod adaptive_probing;
mod alert_backtest;
mod alert_balance;
mod alert_channels;
mod alert_email;
mod alert_outbox;
mod alert_scenario;
mod alerting;
mod alertmanager;
mod baseline_accuracy;
mod baseline_guard;
mod bounded_bodies;
mod bounded_memory;
mod build_hygiene;
mod canary;
mod capabilities;
mod chain_cost;
mod chain_order;
mod chaos;
mod check_config_reach;
mod cli_honest;
mod config_bounds;
mod daemon;
mod decisions;
mod decks;
mod demo_first_hour;
mod demo_profiles;
mod demo_standin;
mod deploy_assets;
mod drills;
mod fuzz_regressions;
mod golden_checks;
mod hidden_trouble;
mod hostile_provider;
mod http_server;
mod metrics_scrape;
mod model_lists;
mod pricing;
mod probe_proxy;
mod probe_standin;
mod prompt_cache;
mod provider_incident_alert;
mod provider_status;
mod ratelimit_headroom;
mod reload;
mod router_export;
mod secret_files;
mod status_page;
mod store_contract;
mod store_disk_faults;
mod store_outage;
mod store_regions;
mod store_startup_faults;
mod store_vanish;
mod systemd_notify;
mod watchman;
mod web_config;
mod weekly_report;
mod workloads;
