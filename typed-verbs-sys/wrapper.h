/* The headers the raw bindings are generated from. */
#include <infiniband/verbs.h>
/* poll(2) and fcntl(2), for bounded waits on completion channels and async event fds. */
#include <poll.h>
#include <fcntl.h>
