/* The headers the raw bindings are generated from. The system calls the library makes
 * (poll(2), fcntl(2), mmap(2), memfd_create(2), ioctl(2), ...) go through the libc crate. */
#include <infiniband/verbs.h>
/* The RDMA connection manager (librdmacm). */
#include <rdma/rdma_cma.h>
/* <linux/udmabuf.h>: the argument of UDMABUF_CREATE (a dma-buf over a sealed memfd). */
#include <linux/udmabuf.h>
