//! Devices, device contexts and their attributes: `ibv_get_device_list`, `ibv_open_device`,
//! `ibv_query_device`, `ibv_query_port`, `ibv_query_gid`.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::error::{Error, Result, Verb};
use crate::transport::{Transport, RAW_PACKET, UD};

/// A device that exists on this machine, as listed by `ibv_get_device_list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The kernel name of the device, e.g. `"rxe0"` or `"mlx5_0"`.
    pub name: String,
    /// The node GUID, in host byte order.
    pub guid: u64,
}

/// `ibv_get_device_list`: the RDMA devices present on this machine.
///
/// An empty list is not an error (a machine without RDMA devices has none).
///
/// # Errors
/// [`Error::Verb`] with `ibv_get_device_list` when the verbs library cannot list devices
/// (e.g. `ENOSYS` when the kernel has no RDMA support).
///
/// See ibv_get_device_list(3).
#[doc(alias = "ibv_get_device_list")]
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    Ok(list.iter().map(|d| d.info()).collect())
}

/// The list returned by `ibv_get_device_list`, freed on drop.
struct DeviceList {
    ptr: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<Self> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array is owned by us until
        // `ibv_free_device_list`.
        let ptr = unsafe { sys::ibv_get_device_list(&mut n) };
        match NonNull::new(ptr) {
            Some(ptr) => Ok(DeviceList { ptr, len: usize::try_from(n).unwrap_or(0) }),
            None => Err(Error::last_os(Verb::GetDeviceList, "listing RDMA devices")),
        }
    }

    fn iter(&self) -> impl Iterator<Item = RawDevice<'_>> + '_ {
        (0..self.len).map(move |i| {
            // SAFETY: the array has `len` valid entries (ibv_get_device_list(3)).
            let dev = unsafe { *self.ptr.as_ptr().add(i) };
            RawDevice { dev, _list: self }
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from ibv_get_device_list and is freed once; the contexts opened
        // from its devices stay valid after the free (ibv_get_device_list(3)).
        unsafe { sys::ibv_free_device_list(self.ptr.as_ptr()) }
    }
}

struct RawDevice<'a> {
    dev: *mut sys::ibv_device,
    _list: &'a DeviceList,
}

impl RawDevice<'_> {
    fn name(&self) -> String {
        // SAFETY: `dev` is a device of a live list; the name is a NUL-terminated string owned
        // by the library.
        let p = unsafe { sys::ibv_get_device_name(self.dev) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated (ibv_get_device_name(3)).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The device's [`DeviceIdentity`]; `name` is its name.
    fn identity(&self, name: &str) -> DeviceIdentity {
        // SAFETY: `dev` is a device of a live list.
        let index = unsafe { sys::ibv_get_device_index(self.dev) };
        DeviceIdentity::of(index, name)
    }

    fn info(&self) -> DeviceInfo {
        // SAFETY: `dev` is a device of a live list.
        let guid = unsafe { sys::ibv_get_device_guid(self.dev) };
        DeviceInfo { name: self.name(), guid: u64::from_be(guid) }
    }
}

/// The verbs that libibverbs dispatches through a context's private operations (whose layout
/// no installed header gives), as function pointers of their C types: `ibv_modify_qp`, the
/// destroys and deregistrations, and the reads of completion and asynchronous events. Every
/// context the library opens calls libibverbs' own ([`LIBIBVERBS`]); the unit tests' fake
/// device has fakes of the same types (`async_races`), so that nothing calls a function through
/// a pointer of another type.
pub(crate) struct Verbs {
    pub(crate) modify_qp: unsafe extern "C" fn(*mut sys::ibv_qp, *mut sys::ibv_qp_attr, c_int) -> c_int,
    pub(crate) destroy_qp: unsafe extern "C" fn(*mut sys::ibv_qp) -> c_int,
    pub(crate) destroy_srq: unsafe extern "C" fn(*mut sys::ibv_srq) -> c_int,
    pub(crate) destroy_cq: unsafe extern "C" fn(*mut sys::ibv_cq) -> c_int,
    pub(crate) dereg_mr: unsafe extern "C" fn(*mut sys::ibv_mr) -> c_int,
    pub(crate) get_cq_event:
        unsafe extern "C" fn(*mut sys::ibv_comp_channel, *mut *mut sys::ibv_cq, *mut *mut c_void) -> c_int,
    pub(crate) get_async_event: unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_async_event) -> c_int,
}

/// libibverbs' verbs: what every context the library opens calls.
pub(crate) static LIBIBVERBS: Verbs = Verbs {
    modify_qp: sys::ibv_modify_qp,
    destroy_qp: sys::ibv_destroy_qp,
    destroy_srq: sys::ibv_destroy_srq,
    destroy_cq: sys::ibv_destroy_cq,
    dereg_mr: sys::ibv_dereg_mr,
    get_cq_event: sys::ibv_get_cq_event,
    get_async_event: sys::ibv_get_async_event,
};

/// An open device: `struct ibv_context`. Cheap to clone (shared); closed when the last clone and
/// every object created from it are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) ctx: NonNull<sys::ibv_context>,
    pub(crate) name: String,
    /// Which device of the machine the context is of (what the connection manager's device is
    /// compared with: `cm::RawId::check_device`).
    pub(crate) identity: DeviceIdentity,
    /// The device's tag ([`DeviceTags`]): the same for every context of the device, and no other
    /// device the process opened has it. The completions of this context's CQs that invalidated an
    /// rkey carry it, and windows are watched under it: rkeys are the device's (rxe's invalidation
    /// looks the rkey up among all the device's windows, whatever the QP's context or PD), so only
    /// that device's windows take them, all of its contexts' windows
    /// ([`BoundMw::invalidated_by`](crate::mw::BoundMw::invalidated_by), `mw::InvalidationWatch`).
    pub(crate) tag: u16,
    /// A number no other context of the process ever has, for values that outlive the
    /// context without holding it (capabilities: [`OdpCap`](crate::odp::OdpCap)).
    pub(crate) id: u64,
    /// The context's CQs, to find the one an `IBV_EVENT_CQ_ERR` names
    /// ([`crate::cq::FailedCq`]).
    pub(crate) cqs: std::sync::Mutex<Vec<std::sync::Weak<crate::cq::CqShared>>>,
    /// The verbs dispatched through the context's private operations: [`LIBIBVERBS`] (a test's
    /// fakes for its fake device).
    pub(crate) verbs: &'static Verbs,
    /// The device's attributes, read when the context was opened: its capabilities and limits
    /// (ports, depths, `atomic_cap`), which the library's checks compare with, are fixed for
    /// the device's life. [`Context::query_device`] reads them afresh.
    pub(crate) attr: DeviceAttr,
}

// SAFETY: libibverbs contexts are thread-safe: every verb may be called on a context from any
// thread, the providers keeping their own locks (`Context::open` refuses a provider told to
// drop them: `provider_keeps_locks`); the pointer is never mutated by us after creation.
unsafe impl Send for ContextInner {}
// SAFETY: as above; shared references only lead to thread-safe verbs.
unsafe impl Sync for ContextInner {}

impl ContextInner {
    /// Why port `n` cannot be used: the device has no such port (`None` when it has).
    pub(crate) fn missing_port(&self, n: u8) -> Option<String> {
        let ports = self.attr.phys_port_cnt();
        (n == 0 || n > ports).then(|| format!("port {n} does not exist on {} (ports are 1..={ports})", self.name))
    }

    /// Refuses, for `verb`, what `wants` atomic operations on a device without them
    /// (`atomic_cap` `IBV_ATOMIC_NONE`; "IBV_ACCESS_REMOTE_ATOMIC ... (if supported)",
    /// ibv_reg_mr(3)): a region or QP granting remote atomics, an atomic request, a bind
    /// granting atomic rights.
    #[inline(always)]
    pub(crate) fn check_atomics(&self, verb: Verb, wants: bool) -> Result<()> {
        // Remote atomic access and atomic requests need a device with atomic operations
        // ("if supported", ibv_reg_mr(3)).
        if wants && self.attr.atomic_cap() == sys::IBV_ATOMIC_NONE {
            return Err(self.no_atomics(verb));
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn no_atomics(&self, verb: Verb) -> Error {
        Error::Unsupported {
            verb,
            what: format!("atomic operations: device {} reports atomic_cap IBV_ATOMIC_NONE", self.name),
            source: None,
        }
    }

    /// Whether the address vector `av` (as `ibv_modify_qp` took it) may name this device: its
    /// destination GID is in the device's GID table (`ibv_query_gid_table`), or, without a
    /// GRH, its destination LID is one of a port's (any port: through a switch, another port of
    /// the device; any LID of the port's LMC range). True when the tables cannot be read: the
    /// answer decides whether a SEND_WITH_INV is checked against this device's windows, and
    /// checking is the safe side.
    pub(crate) fn may_be_own_address(&self, av: &sys::ibv_ah_attr) -> bool {
        let attr = &self.attr;
        if av.is_global == 0 {
            return (1..=attr.raw.phys_port_cnt).any(|port| {
                self.raw_port(port).is_none_or(|p| {
                    let lids = u32::from(p.lid)..u32::from(p.lid) + (1u32 << p.lmc.min(7));
                    lids.contains(&u32::from(av.dlid))
                })
            });
        }
        let mut len = 0usize;
        for port in 1..=attr.raw.phys_port_cnt {
            let Some(p) = self.raw_port(port) else { return true };
            len += usize::try_from(p.gid_tbl_len).unwrap_or(0);
        }
        let mut entries = vec![sys::ibv_gid_entry::default(); len];
        // SAFETY: the context is open; `entries` has room for `len` entries, which the call
        // writes at most (its `max_entries`), and outlives it.
        let n = unsafe { sys::ibv_query_gid_table(self.ctx.as_ptr(), entries.as_mut_ptr(), len, 0) };
        let Ok(n) = usize::try_from(n) else { return true };
        // SAFETY: reading the GID union's raw bytes, valid for every bit pattern.
        let dgid = unsafe { av.grh.dgid.raw };
        // SAFETY: as above, for the entries the call filled.
        entries[..n.min(len)].iter().any(|e| unsafe { e.gid.raw } == dgid)
    }

    /// `ibv_query_port` of `port`; `None` when it fails.
    fn raw_port(&self, port: u8) -> Option<sys::ibv_port_attr> {
        let mut p = sys::ibv_port_attr::default();
        // SAFETY: the context is open; `p` is a valid out-pointer of the right type (the
        // inline helper `ibv_query_port` expands to, as in `Context::query_port`).
        let ret = unsafe { sys::___ibv_query_port(self.ctx.as_ptr(), port, &mut p) };
        (ret == 0).then_some(p)
    }

    /// The device's attributes as read when the context was opened (its capabilities and
    /// limits, fixed for the device's life): what the library's checks compare with.
    pub(crate) fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    /// `ibv_query_device` ([`Context::query_device`]), for the objects that hold the context.
    pub(crate) fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = sys::ibv_device_attr::default();
        // SAFETY: the context is open; `attr` is a valid out-pointer of the right type.
        let ret = unsafe { sys::ibv_query_device(self.ctx.as_ptr(), &mut attr) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::QueryDevice, format!("device {}", self.name), ret));
        }
        Ok(DeviceAttr { raw: attr, ctx: self.id })
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: the context is open and every child object holds an `Arc` to this inner, so
        // none is left when it is dropped. A failure cannot be acted on; it is ignored rather
        // than panicking in drop.
        let _ = unsafe { sys::ibv_close_device(self.ctx.as_ptr()) };
    }
}

/// The tags of the devices the process has opened ([`ContextInner::tag`]): one per device,
/// shared by its contexts and kept after they are closed (a later context of the same device
/// takes it again), never given to another device. So a completion names the device that
/// decoded it for as long as it is kept: one of a device whose contexts are all closed cannot
/// pass for a completion of another device (`Pd::create_ah_from_wc`, `BoundMw::invalidated_by`).
/// Devices are told apart by the kernel's index, which a device created anew does not share
/// with an earlier one; where the kernel reports none, by name (a device created anew under an
/// earlier one's name is then the same device). A process that opens 65,535 devices (devices
/// created anew count each time) can open no other: `Context::open` refuses it, typed.
struct DeviceTags {
    /// The devices opened so far: the tag of `known[i]` is `i + 1`.
    known: Vec<DeviceIdentity>,
}

/// Which device of the machine a context is of: the kernel's index of the device
/// (`ibv_get_device_index`, which a device created anew does not share with an earlier one), or
/// its name where the kernel does not report an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeviceIdentity {
    Index(u32),
    Name(String),
}

impl DeviceIdentity {
    /// The identity of the device whose `ibv_get_device_index` is `index` (negative where the
    /// kernel reports none) and whose name is `name`.
    pub(crate) fn of(index: i32, name: &str) -> Self {
        match u32::try_from(index) {
            Ok(index) => DeviceIdentity::Index(index),
            Err(_) => DeviceIdentity::Name(name.to_owned()),
        }
    }
}

/// Tags start at 1: 0 is the tag of no device (`Completion::device_tag` of a completion the
/// library made).
static DEVICE_TAGS: std::sync::Mutex<DeviceTags> = std::sync::Mutex::new(DeviceTags { known: Vec::new() });

impl DeviceTags {
    /// The tag of the device `id`; `None` once 65,535 other devices have been opened.
    fn take(id: DeviceIdentity) -> Option<u16> {
        let mut t = DEVICE_TAGS.lock().unwrap_or_else(|e| e.into_inner());
        let at = match t.known.iter().position(|known| *known == id) {
            Some(at) => at,
            // Room for tags 1 to u16::MAX; a device beyond is not kept (it has no tag).
            None if t.known.len() < usize::from(u16::MAX) => {
                t.known.push(id);
                t.known.len() - 1
            }
            None => return None,
        };
        u16::try_from(at + 1).ok()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("device", &self.inner.name).finish()
    }
}

/// A device context whose provider lacks an operation the library calls directly (as verbs.h's
/// inline verbs do): nothing is created on it.
#[cold]
pub(crate) fn provider_lacks(verb: Verb, op: &str, device: &str) -> Error {
    Error::Unsupported { verb, what: format!("a provider without {op} (device {device})"), source: None }
}

/// rdma-core's mlx5 provider drops its own locks when the program says it is single-threaded
/// (`MLX5_SINGLE_THREADED=1`, read when a context is opened); every handle of the library is
/// `Send + Sync` and its threads call the provider concurrently (a post beside a poll of the
/// same QP's CQ), which needs them.
const SINGLE_THREADED_ENV: &str = "MLX5_SINGLE_THREADED";

/// Refuses to open a device while the environment tells its provider to drop its locks
/// (`var` read by `get`, the process environment in [`Context::open`]).
fn provider_keeps_locks(get: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<()> {
    match get(SINGLE_THREADED_ENV) {
        Some(v) if v == "1" => Err(Error::invalid(
            "ibv_open_device",
            format!(
                "{SINGLE_THREADED_ENV}=1 makes the mlx5 provider drop the locks of its queues, which this \
                 library's Send + Sync handles rely on (a post on one thread beside a poll of its CQ on \
                 another): unset it"
            ),
        )),
        _ => Ok(()),
    }
}

impl Context {
    /// `ibv_open_device` on the device called `name`.
    ///
    /// # Errors
    /// - [`Error::DeviceNotFound`] naming the device (and listing those present) if no device
    ///   has that name;
    /// - [`Error::Verb`] with `ibv_open_device` if opening fails, or with `ibv_query_device`
    ///   if the device's attributes cannot be read (the context keeps them: the library's
    ///   checks compare with its limits and capabilities);
    /// - [`Error::InvalidArgument`] once the process has opened 65,535 other devices (each
    ///   device keeps the tag its completions carry for the process's life), or while
    ///   `MLX5_SINGLE_THREADED=1` is set: it makes the mlx5 provider drop the locks of its
    ///   queues, which the library's `Send + Sync` handles rely on.
    ///
    /// See ibv_open_device(3).
    #[doc(alias = "ibv_open_device")]
    pub fn open(name: &str) -> Result<Context> {
        provider_keeps_locks(|var| std::env::var_os(var))?;
        let list = DeviceList::get()?;
        let found = list.iter().find(|d| d.name() == name);
        let Some(dev) = found else {
            return Err(Error::DeviceNotFound {
                name: name.to_owned(),
                available: list.iter().map(|d| d.name()).collect(),
            });
        };
        let identity = dev.identity(name);
        let Some(tag) = DeviceTags::take(identity.clone()) else {
            return Err(Error::invalid("ibv_open_device", "65,535 other devices were opened in this process"));
        };
        // SAFETY: `dev` is a device of the live list `list`.
        let ctx = unsafe { sys::ibv_open_device(dev.dev) };
        let Some(ctx) = NonNull::new(ctx) else {
            return Err(Error::last_os(Verb::OpenDevice, format!("device {name}")));
        };
        let cqs = std::sync::Mutex::new(Vec::new());
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let attr = DeviceAttr { raw: sys::ibv_device_attr::default(), ctx: id };
        let mut inner = ContextInner { ctx, name: name.to_owned(), identity, tag, id, cqs, verbs: &LIBIBVERBS, attr };
        // (On failure `inner`'s drop closes the device.)
        inner.attr = inner.query_device()?;
        Ok(Context { inner: Arc::new(inner) })
    }

    /// The device name this context was opened on.
    pub fn device_name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_context {
        self.inner.ctx.as_ptr()
    }

    /// `ibv_query_device`: the device's attributes and limits.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_query_device` and its errno.
    ///
    /// See ibv_query_device(3).
    #[doc(alias = "ibv_query_device")]
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.inner.query_device()
    }

    /// `ibv_query_port`: the attributes of port `port` (ports are numbered from 1).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for port 0 or a port above the device's port count;
    /// - [`Error::Verb`] with `ibv_query_port` and its errno.
    ///
    /// See ibv_query_port(3).
    #[doc(alias = "ibv_query_port")]
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.check_port(port)?;
        let mut attr = sys::ibv_port_attr::default();
        // SAFETY: the context is open; `attr` is a valid out-pointer. `ibv_query_port` is a
        // macro over this inline helper; the exported symbol takes an older struct.
        let ret = unsafe { sys::___ibv_query_port(self.as_ptr(), port, &mut attr) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::QueryPort, format!("device {} port {port}", self.inner.name), ret));
        }
        Ok(PortAttr { raw: attr })
    }

    pub(crate) fn check_port(&self, port: u8) -> Result<()> {
        match self.inner.missing_port(port) {
            Some(why) => Err(Error::invalid("ibv_query_port", why)),
            None => Ok(()),
        }
    }

    /// `ibv_query_gid`: entry `index` of the GID table of port `port`. The index is a `u8`,
    /// as `sgid_index` of the address vectors it is used in (`struct ibv_global_route`).
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for a port that does not exist or an index at or above the
    ///   port's GID table length;
    /// - [`Error::Verb`] with `ibv_query_gid` and its errno.
    ///
    /// See ibv_query_gid(3).
    #[doc(alias = "ibv_query_gid")]
    pub fn query_gid(&self, port: u8, index: u8) -> Result<Gid> {
        let len = self.query_port(port)?.gid_tbl_len();
        let idx = Some(i32::from(index)).filter(|&i| (i as u32) < len).ok_or_else(|| {
            Error::invalid(
                "ibv_query_gid",
                format!("GID index {index} is out of range for {} port {port} (table length {len})", self.inner.name),
            )
        })?;
        let mut gid = sys::ibv_gid::default();
        // SAFETY: the context is open; `gid` is a valid out-pointer; port and index checked.
        let ret = unsafe { sys::ibv_query_gid(self.as_ptr(), port, idx, &mut gid) };
        if ret != 0 {
            return Err(Error::from_ret(
                Verb::QueryGid,
                format!("device {} port {port} index {index}", self.inner.name),
                ret,
            ));
        }
        // SAFETY: every bit pattern of the 16-byte union is a valid `[u8; 16]`.
        Ok(Gid(unsafe { gid.raw }))
    }

    /// `ibv_query_gid_ex` of every index of port `port`: the port's GID table with each entry's
    /// type (InfiniBand, RoCE v1, RoCE v2) and network interface. Unused entries are left out,
    /// and so are entries above index 255, which no address vector can name
    /// ([`GidEntry::index`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a port that does not exist; [`Error::Verb`] with
    /// `ibv_query_gid` and its errno for a failure other than an unused entry (`ENODATA`).
    ///
    /// See ibv_query_gid_ex(3).
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len();
        let mut table = Vec::new();
        for index in (0..=u8::MAX).take_while(|&i| u32::from(i) < len) {
            if let Some((gid, gid_type, ifindex)) = self.gid_entry(port, u32::from(index))? {
                table.push(GidEntry { gid, index, gid_type, ifindex });
            }
        }
        Ok(table)
    }

    /// `ibv_query_gid_ex` of entry `index` of port `port` (checked by the caller: the port
    /// exists, the index is below its table's length): the GID, its type and its network
    /// interface, `None` for an unused entry.
    pub(crate) fn gid_entry(&self, port: u8, index: u32) -> Result<Option<(Gid, GidType, u32)>> {
        let mut e = sys::ibv_gid_entry::default();
        // SAFETY: the context is open; `e` is a valid out-pointer of the header's type (the
        // inline `ibv_query_gid_ex` passes its size); the caller checked port and index.
        let ret = unsafe { sys::ibv_query_gid_ex(self.as_ptr(), u32::from(port), index, &mut e, 0) };
        if ret == libc::ENODATA || ret == -libc::ENODATA {
            return Ok(None);
        }
        if ret != 0 {
            return Err(Error::from_ret(
                Verb::QueryGid,
                format!("ibv_query_gid_ex, device {} port {port} index {index}", self.inner.name),
                ret,
            ));
        }
        // SAFETY: every bit pattern of the 16-byte union is a valid `[u8; 16]`.
        let gid = Gid(unsafe { e.gid.raw });
        Ok((!gid.is_zero()).then_some((gid, GidType::from_raw(e.gid_type), e.ndev_ifindex)))
    }

    /// `ibv_query_gid_ex` and `ibv_query_port`: the GID index a connection from port `port`
    /// uses by default: the RoCE v2 GID of an IPv4 address of the port's interface on RoCE
    /// (what rdma_cm picks for an IPv4 connection), the first GID (the port GID) on InfiniBand.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a RoCE port has no RoCE v2 GID of an IPv4 address (no
    /// IPv4 address on its interface); as [`Context::gid_table`]; [`Error::Verb`] with
    /// `ibv_query_port`.
    ///
    /// See ibv_query_gid_ex(3), ibv_query_port(3).
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn default_gid_index(&self, port: u8) -> Result<u8> {
        let table = self.gid_table(port)?;
        if self.query_port(port)?.link_layer() != LinkLayer::Ethernet {
            return table.first().map(|e| e.index).ok_or_else(|| {
                Error::invalid("ibv_query_gid_ex", format!("{} port {port} has no GID", self.inner.name))
            });
        }
        table.iter().find(|e| e.gid_type == GidType::RoceV2 && e.gid.ipv4().is_some()).map(|e| e.index).ok_or_else(
            || {
                Error::invalid(
                    "ibv_query_gid_ex",
                    format!(
                        "{} port {port} has no RoCE v2 GID of an IPv4 address (is an IPv4 address set on its interface?)",
                        self.inner.name
                    ),
                )
            },
        )
    }
}

/// The type of a GID table entry (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// `IBV_GID_TYPE_IB`: an InfiniBand GID.
    Ib,
    /// `IBV_GID_TYPE_ROCE_V1`: RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// `IBV_GID_TYPE_ROCE_V2`: RoCE v2 (UDP/IP, routable).
    RoceV2,
    /// A value this library does not know.
    Other(u32),
}

impl GidType {
    fn from_raw(t: u32) -> Self {
        match t {
            sys::IBV_GID_TYPE_IB => GidType::Ib,
            sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            other => GidType::Other(other),
        }
    }
}

/// An entry of a port's GID table (`struct ibv_gid_entry`), [`Context::gid_table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table (what address vectors and endpoints name): a `u8`, as
    /// `sgid_index` of `struct ibv_global_route`.
    pub index: u8,
    /// Its type.
    pub gid_type: GidType,
    /// The network interface it belongs to (RoCE), 0 for none.
    pub ifindex: u32,
}

/// The vendor id the rxe driver reports (`RXE_VENDOR_ID`).
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// A 128-bit global identifier, in network byte order as on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// True when every byte is zero (an unused GID table entry).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`, RoCE's GID of an IPv4
    /// address).
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        std::net::Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    pub(crate) fn to_raw(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Gid {
    /// Eight colon-separated groups of four hex digits, like `ibv_devinfo -v`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// The attributes of a device: `struct ibv_device_attr`.
#[derive(Clone)]
pub struct DeviceAttr {
    raw: sys::ibv_device_attr,
    /// The context queried ([`ContextInner::id`]): the capabilities it hands out are its own.
    ctx: u64,
}

impl DeviceAttr {
    /// The attributes of a fake context `ctx` (unit tests): all zero, but `atomic_cap`.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn fake(ctx: u64, atomics: bool) -> Self {
        let atomic_cap = if atomics { sys::IBV_ATOMIC_HCA } else { sys::IBV_ATOMIC_NONE };
        // Both window types (the fake context's `alloc_mw`, `bind_mw`, `dealloc_mw`: the
        // memory-window attack tests).
        let device_cap_flags = sys::IBV_DEVICE_MEM_WINDOW | sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B;
        DeviceAttr { raw: sys::ibv_device_attr { atomic_cap, device_cap_flags, ..Default::default() }, ctx }
    }

    /// As [`DeviceAttr::fake`], with room for queues (unit tests of `Pd::create_qp`'s checks):
    /// 1024 requests of 4 entries per queue, shared receive queues included.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn with_fake_queue_limits(mut self) -> Self {
        (self.raw.max_qp_wr, self.raw.max_sge, self.raw.max_srq_wr, self.raw.max_srq_sge) = (1024, 4, 1024, 4);
        self
    }
}

impl fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("max_qp", &self.max_qp())
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_sge", &self.max_sge())
            .field("max_cqe", &self.max_cqe())
            .field("max_mr", &self.max_mr())
            .field("max_mw", &self.max_mw())
            .field("phys_port_cnt", &self.phys_port_cnt())
            .finish_non_exhaustive()
    }
}

macro_rules! int_getters {
    ($($(#[$doc:meta])* $name:ident: $field:ident as $t:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> $t {
            // A negative limit (a provider's error) allows nothing; one above the type's
            // range is its largest value.
            #[allow(unused_comparisons)]
            let negative = self.raw.$field < 0;
            <$t>::try_from(self.raw.$field).unwrap_or(if negative { 0 } else { <$t>::MAX })
        }
    )*};
}

impl DeviceAttr {
    /// The firmware version string.
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> = self.raw.fw_ver.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    int_getters! {
        /// Largest memory region, in bytes.
        max_mr_size: max_mr_size as u64;
        /// Maximum number of QPs.
        max_qp: max_qp as u32;
        /// Maximum work requests per queue.
        max_qp_wr: max_qp_wr as u32;
        /// Maximum scatter/gather entries per work request.
        max_sge: max_sge as u32;
        /// Maximum completion queues.
        max_cq: max_cq as u32;
        /// Maximum entries per completion queue.
        max_cqe: max_cqe as u32;
        /// Maximum memory regions.
        max_mr: max_mr as u32;
        /// Maximum protection domains.
        max_pd: max_pd as u32;
        /// Maximum outstanding RDMA READ/atomic requests a QP can receive.
        max_qp_rd_atom: max_qp_rd_atom as u32;
        /// Maximum outstanding RDMA READ/atomic requests a QP can initiate.
        max_qp_init_rd_atom: max_qp_init_rd_atom as u32;
        /// Maximum memory windows.
        max_mw: max_mw as u32;
        /// Maximum shared receive queues.
        max_srq: max_srq as u32;
        /// Maximum receives per shared receive queue.
        max_srq_wr: max_srq_wr as u32;
        /// Maximum scatter/gather entries per receive of a shared receive queue.
        max_srq_sge: max_srq_sge as u32;
        /// Maximum address handles.
        max_ah: max_ah as u32;
        /// Number of physical ports.
        phys_port_cnt: phys_port_cnt as u8;
    }

    /// The IEEE vendor id.
    pub fn vendor_id(&self) -> u32 {
        self.raw.vendor_id
    }

    /// The vendor's part id.
    pub fn vendor_part_id(&self) -> u32 {
        self.raw.vendor_part_id
    }

    /// True for Soft-RoCE (`rdma_rxe`), which reports vendor id 0xFFFFFF.
    pub fn is_soft_roce(&self) -> bool {
        self.raw.vendor_id == RXE_VENDOR_ID
    }

    /// The `IBV_DEVICE_*` capability flags.
    pub fn device_cap_flags(&self) -> u32 {
        self.raw.device_cap_flags
    }

    /// Proof that the device offloads IPv4/TCP/UDP checksums on `T` queue pairs
    /// (`IBV_DEVICE_UD_IP_CSUM` for UD, `IBV_DEVICE_RAW_IP_CSUM` for RAW_PACKET), or `None`.
    /// `IBV_SEND_IP_CSUM` can only be requested with this value
    /// ([`SendRequest::ip_csum`](crate::wr::SendRequest::ip_csum)).
    pub fn ip_csum<T: ChecksumOffload>(&self) -> Option<IpCsum<T>> {
        (self.raw.device_cap_flags & T::CAP_FLAG != 0).then_some(IpCsum { ctx: self.ctx, _t: PhantomData })
    }

    /// The atomic operation support level (`IBV_ATOMIC_NONE`, `_HCA` or `_GLOB`).
    pub fn atomic_cap(&self) -> sys::ibv_atomic_cap {
        self.raw.atomic_cap
    }
}

/// The attributes of a port: `struct ibv_port_attr`.
#[derive(Clone)]
pub struct PortAttr {
    raw: sys::ibv_port_attr,
}

/// The state of a port (`enum ibv_port_state`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_NOP`.
    Nop,
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_INIT`.
    Init,
    /// `IBV_PORT_ARMED`.
    Armed,
    /// `IBV_PORT_ACTIVE`: the port passes traffic.
    Active,
    /// `IBV_PORT_ACTIVE_DEFER`.
    ActiveDefer,
    /// A value this library does not know, preserved.
    Unknown(u32),
}

/// A path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// The size in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }

    pub(crate) const fn to_raw(self) -> sys::ibv_mtu {
        match self {
            Mtu::Mtu256 => sys::IBV_MTU_256,
            Mtu::Mtu512 => sys::IBV_MTU_512,
            Mtu::Mtu1024 => sys::IBV_MTU_1024,
            Mtu::Mtu2048 => sys::IBV_MTU_2048,
            Mtu::Mtu4096 => sys::IBV_MTU_4096,
        }
    }

    pub(crate) fn from_raw(v: sys::ibv_mtu) -> Option<Mtu> {
        Some(match v {
            sys::IBV_MTU_256 => Mtu::Mtu256,
            sys::IBV_MTU_512 => Mtu::Mtu512,
            sys::IBV_MTU_1024 => Mtu::Mtu1024,
            sys::IBV_MTU_2048 => Mtu::Mtu2048,
            sys::IBV_MTU_4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

/// The link layer of a port.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE, iWARP): addressing needs a GRH.
    Ethernet,
    /// Unspecified or unknown.
    Unknown(u8),
}

impl fmt::Debug for PortAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortAttr")
            .field("state", &self.state())
            .field("active_mtu", &self.active_mtu())
            .field("max_mtu", &self.max_mtu())
            .field("lid", &self.lid())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .field("pkey_tbl_len", &self.pkey_tbl_len())
            .field("link_layer", &self.link_layer())
            .finish_non_exhaustive()
    }
}

impl PortAttr {
    /// The port state.
    pub fn state(&self) -> PortState {
        match self.raw.state {
            sys::IBV_PORT_NOP => PortState::Nop,
            sys::IBV_PORT_DOWN => PortState::Down,
            sys::IBV_PORT_INIT => PortState::Init,
            sys::IBV_PORT_ARMED => PortState::Armed,
            sys::IBV_PORT_ACTIVE => PortState::Active,
            sys::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            other => PortState::Unknown(other),
        }
    }
    /// The active MTU, if it is a known value.
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.raw.active_mtu)
    }
    /// The largest MTU the port supports, if it is a known value.
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.raw.max_mtu)
    }
    /// The base LID (0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.raw.lid
    }
    /// The length of the GID table.
    pub fn gid_tbl_len(&self) -> u32 {
        u32::try_from(self.raw.gid_tbl_len).unwrap_or(0)
    }
    /// The length of the P_Key table (a QP's `pkey_index` is below it).
    pub fn pkey_tbl_len(&self) -> u16 {
        self.raw.pkey_tbl_len
    }
    /// The link layer.
    pub fn link_layer(&self) -> LinkLayer {
        match u32::from(self.raw.link_layer) {
            sys::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            sys::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unknown(self.raw.link_layer),
        }
    }
    /// The largest message size the port supports.
    pub fn max_msg_sz(&self) -> u32 {
        self.raw.max_msg_sz
    }
}

/// Transports on which a device may offload IP checksums (ibv_post_send(3),
/// `IBV_SEND_IP_CSUM`).
#[diagnostic::on_unimplemented(
    message = "IBV_SEND_IP_CSUM is not available on {Self} queue pairs",
    label = "no checksum offload on this transport",
    note = "ibv_post_send(3): IBV_SEND_IP_CSUM is \"Valid only when device_cap_flags in device_attr indicates current QP is supported by checksum offload\"",
    note = "devices report checksum offload for UD (IBV_DEVICE_UD_IP_CSUM) and RAW_PACKET (IBV_DEVICE_RAW_IP_CSUM) only"
)]
pub trait ChecksumOffload: Transport {
    /// The `IBV_DEVICE_*` capability flag.
    const CAP_FLAG: u32;
}
impl ChecksumOffload for UD {
    const CAP_FLAG: u32 = sys::IBV_DEVICE_UD_IP_CSUM;
}
impl ChecksumOffload for RAW_PACKET {
    const CAP_FLAG: u32 = sys::IBV_DEVICE_RAW_IP_CSUM;
}

/// Proof, obtained from [`DeviceAttr::ip_csum`], that the device offloads IP checksums on `T`
/// queue pairs. Cannot be built otherwise.
pub struct IpCsum<T> {
    /// The context that reported it ([`ContextInner::id`]).
    pub(crate) ctx: u64,
    _t: PhantomData<fn() -> T>,
}

#[cfg(test)]
impl<T> IpCsum<T> {
    /// The capability as the context `ctx` would report it (unit tests).
    pub(crate) fn of_context(ctx: u64) -> Self {
        IpCsum { ctx, _t: PhantomData }
    }
}

impl<T> Clone for IpCsum<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for IpCsum<T> {}
impl<T: Transport> fmt::Debug for IpCsum<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpCsum<{}>", T::NAME)
    }
}

/// Proof, from [`Context::tso`], that the device supports TCP segmentation offload on `T`
/// queue pairs, with its largest TSO payload. Cannot be built otherwise.
///
/// The library creates QPs with `ibv_create_qp`, which sets no `max_tso_header`: a provider
/// that bounds a TSO request's header by it (mlx5: 0 unless set at creation) refuses every
/// TSO post ([`Error::Verb`] with `ibv_post_send` and its errno). TSO is untested here (rxe
/// has none).
pub struct TsoCap<T> {
    max_tso: u32,
    /// The context that reported it ([`ContextInner::id`]).
    pub(crate) ctx: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TsoCap<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for TsoCap<T> {}
impl<T: Transport> fmt::Debug for TsoCap<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TsoCap<{}>(max_tso {})", T::NAME, self.max_tso)
    }
}

impl<T> TsoCap<T> {
    /// The largest payload one TSO work request may carry.
    pub fn max_tso(&self) -> u32 {
        self.max_tso
    }

    /// A capability of `max_tso` bytes, as a device of context `ctx` would report it (for the
    /// request checks' unit tests; no device in the tree has TSO).
    #[cfg(test)]
    pub(crate) fn reported(max_tso: u32, ctx: u64) -> Self {
        TsoCap { max_tso, ctx, _t: PhantomData }
    }
}

/// Transports on which `IBV_WR_TSO` exists (ibv_post_send(3) opcode table: UD, RAW_PACKET).
#[diagnostic::on_unimplemented(
    message = "TSO is not valid on a {Self} queue pair (ibv_post_send(3) opcode table)",
    label = "not allowed on this transport",
    note = "ibv_post_send(3): IBV_WR_TSO is valid on UD and RAW_PACKET only"
)]
pub trait TsoTransport: crate::transport::SupportsTso {}
impl TsoTransport for UD {}
impl TsoTransport for RAW_PACKET {}

impl Context {
    /// `ibv_query_device_ex` → `tso_caps`: a capability for TSO on `T` queue pairs, or `None`
    /// when the device does not support it there (`supported_qpts` lacks `T`, or `max_tso` is 0).
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_query_device_ex` and its errno.
    ///
    /// See ibv_query_device_ex(3).
    #[doc(alias = "ibv_query_device_ex")]
    pub fn tso<T: TsoTransport>(&self) -> Result<Option<TsoCap<T>>> {
        let mut attr = sys::ibv_device_attr_ex::default();
        // SAFETY: the context is open; no input struct; `attr` is a valid out-pointer.
        let ret = unsafe { sys::ibv_query_device_ex(self.as_ptr(), std::ptr::null(), &mut attr) };
        if ret != 0 {
            return Err(Error::from_ret(Verb::QueryDeviceEx, format!("device {}", self.inner.name), ret));
        }
        let t = attr.tso_caps;
        let supported = t.max_tso > 0 && t.supported_qpts & (1u32 << T::QP_TYPE) != 0;
        Ok(supported.then_some(TsoCap { max_tso: t.max_tso, ctx: self.inner.id, _t: PhantomData }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `MLX5_SINGLE_THREADED=1` (mlx5 compares the value with "1" exactly) refuses the open;
    /// unset or any other value does not.
    #[test]
    fn a_provider_told_to_drop_its_locks_is_not_opened() {
        let env =
            |value: Option<&'static str>| move |var: &str| value.filter(|_| var == SINGLE_THREADED_ENV).map(Into::into);
        crate::test_util::assert_refused(
            provider_keeps_locks(env(Some("1"))),
            "ibv_open_device",
            "MLX5_SINGLE_THREADED=1",
        );
        assert!(provider_keeps_locks(env(None)).is_ok());
        assert!(provider_keeps_locks(env(Some("0"))).is_ok());
        assert!(provider_keeps_locks(env(Some("yes"))).is_ok());
    }

    /// A negative limit (a provider's error) reads as 0, nothing allowed; in range, as is.
    #[test]
    fn negative_device_limits_allow_nothing() {
        let raw = sys::ibv_device_attr { max_cqe: -1, max_qp_wr: i32::MIN, max_sge: 30, ..Default::default() };
        let attr = DeviceAttr { raw, ctx: 0 };
        assert_eq!((attr.max_cqe(), attr.max_qp_wr(), attr.max_sge()), (0, 0, 30));
    }

    /// An errno of `i32::MIN` returned by a provider becomes an error, with no overflow.
    #[test]
    fn a_return_of_i32_min_is_an_error_not_an_overflow() {
        let e = Error::from_ret(Verb::PostSend, "x", i32::MIN);
        assert_eq!(e.errno(), Some(i32::MIN));
        assert_eq!(Error::from_ret(Verb::PostSend, "x", -22).errno(), Some(22));
    }

    #[test]
    fn device_tags_are_shared_by_a_devices_contexts_and_never_given_to_another_device() {
        // Identities no device of a test machine has.
        let (x, y) = (DeviceIdentity::Name("tag-test-x".into()), DeviceIdentity::Index(u32::MAX));
        let (a, b) = (DeviceTags::take(x.clone()).unwrap(), DeviceTags::take(y.clone()).unwrap());
        assert_ne!(a, b, "two devices");
        assert!(a != 0 && b != 0, "0 is no device's tag");
        assert_eq!(DeviceTags::take(x.clone()), Some(a), "a second context of x");
        // Whatever of x is closed meanwhile (closing gives nothing back), a device opened later
        // has a tag of its own: a completion x decoded cannot pass for one of it.
        let z = DeviceTags::take(DeviceIdentity::Name("tag-test-z".into())).unwrap();
        assert!(z != a && z != b, "z, opened after x and y: {z} against {a} and {b}");
        assert_eq!(DeviceTags::take(x), Some(a), "x opened again");
        assert_eq!(DeviceTags::take(y), Some(b), "y opened again");
    }
}
