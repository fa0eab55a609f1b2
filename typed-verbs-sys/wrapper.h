/* The headers the raw bindings are generated from. _GNU_SOURCE (before any system header):
 * memfd_create(2). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>
/* The RDMA connection manager (librdmacm). */
#include <rdma/rdma_cma.h>
/* poll(2) and fcntl(2), for bounded waits on completion channels and async event fds. */
#include <poll.h>
#include <fcntl.h>
/* mmap(2), munmap(2), madvise(2), memfd_create(2), ftruncate(2), close(2), sysconf(3): memory
 * of On-Demand Paging regions. */
#include <sys/mman.h>
#include <unistd.h>
/* ioctl(2) and <linux/udmabuf.h>: a dma-buf over a sealed memfd (UDMABUF_CREATE). */
#include <sys/ioctl.h>
#include <linux/udmabuf.h>
