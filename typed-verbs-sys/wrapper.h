/* The one header the raw bindings are generated from. */
#include <infiniband/verbs.h>
