/// @file
/// The engine's device-side plan, written once over an engine backend (engine/backend.hpp): the
/// per-parameter device state, and per step the prologue scalars, the selection and migration of
/// state between host and device, the fused updates, the pack of host-set gradients into staging
/// slots, the step record, and the upload and scatter of a host window's new weights. The host,
/// emulated and CUDA backends run this same code; they differ only in where memory lives and
/// when enqueued work runs.
///
/// Blocking points (the engine counts them as stall): setup, download_weights, select_all (a
/// selection step's one wait: every matrix's new set and the skip flag), wait_upload_done,
/// wait_migration, and read_device_state / write_device_state; and update()'s wait for the last
/// copy of its pinned table (returns at once in practice: that copy was enqueued a step before).
/// Everything else, a selection's migration included, is stream-ordered on the stream given. On
/// CUDA a copy from pageable host memory also waits for its stream (CUDA's rule for pageable
/// H2D): the few small tables a selection step uploads from std::vectors do, after its one wait.
///
/// The definitions: setup and its parts (device_plan_setup.hpp), the step's operations
/// (device_plan_impl.hpp), the upload of a host window's weights (device_plan_upload.hpp), the
/// selection steps and state transfers (device_plan_migrate.hpp).
#pragma once

// The class, then its members' definitions (each part includes the class, never this header).
#include <zenflow/engine/detail/plan/device_plan_decl.hpp>
#include <zenflow/engine/detail/plan/device_plan_impl.hpp>
#include <zenflow/engine/detail/plan/device_plan_migrate.hpp>
#include <zenflow/engine/detail/plan/device_plan_setup.hpp>
#include <zenflow/engine/detail/plan/device_plan_upload.hpp>
