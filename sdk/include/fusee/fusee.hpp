// The whole public API of Fusee.
#pragma once

#include "fusee/clock.hpp"
#include "fusee/config.hpp"
#include "fusee/ctx.hpp"
#include "fusee/engine.hpp"
#include "fusee/error.hpp"
#include "fusee/limits.hpp"
#include "fusee/queue.hpp"
#include "fusee/refs.hpp"
#include "fusee/schedule.hpp"
#include "fusee/task.hpp"
#include "fusee/version.hpp"
