#include "server/engine/clock.h"
