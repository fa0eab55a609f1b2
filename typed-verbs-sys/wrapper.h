/* The headers the raw bindings are generated from. */
#include <infiniband/verbs.h>
/* poll(2) and fcntl(2), for bounded waits on completion channels and async event fds. */
#include <poll.h>
#include <fcntl.h>
/* mmap(2), munmap(2), madvise(2), sysconf(3): memory of On-Demand Paging regions. */
#include <sys/mman.h>
#include <unistd.h>
