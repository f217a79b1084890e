// Umbrella header for the memattn C++ API.
#pragma once

#include "memattn/attention.hpp"
#include "memattn/dropout.hpp"
#include "memattn/kernels.hpp"
#include "memattn/reference.hpp"
#include "memattn/status.hpp"
#include "memattn/types.hpp"
