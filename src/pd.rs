//! Protection domains: `ibv_alloc_pd`, `ibv_dealloc_pd`.
#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use typed_verbs_sys as sys;

use crate::device::{Context, ContextInner};
use crate::error::{Error, Result, Verb};

/// A protection domain: `struct ibv_pd`. Cheap to clone (shared); deallocated when the last
/// clone and every object created in it are gone.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) pd: NonNull<sys::ibv_pd>,
    pub(crate) ctx: Arc<ContextInner>,
}

/// The identity of a protection domain, to check that two objects belong together before the
/// provider sees them (DESIGN.md §5, "Objects that meet"). Two identities are compared only
/// while both objects are alive, and each holds an `Arc` of its PD, so an address cannot be
/// reused by another PD meanwhile. A PD belongs to one device context, so the same PD also
/// means the same context.
///
/// Opaque: only the library reads it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdId(usize);

impl PdInner {
    /// The identity of this PD.
    pub(crate) fn id(self: &Arc<Self>) -> PdId {
        PdId(Arc::as_ptr(self) as usize)
    }
}

#[cfg(test)]
impl PdId {
    /// An identity no live PD has (for unit tests that build views without a device).
    pub(crate) fn dummy() -> Self {
        PdId(usize::MAX)
    }

    /// A second identity no live PD has, different from [`PdId::dummy`].
    pub(crate) fn other_dummy() -> Self {
        PdId(usize::MAX - 1)
    }
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe); the pointer is
// not mutated after creation.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: every object created in this PD (MR, QP, AH, MW, SRQ) holds an `Arc` to this
        // inner, so none is alive any more. A failure cannot be acted on in drop; ignored.
        let _ = unsafe { sys::ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd").field("device", &self.inner.ctx.name).finish()
    }
}

impl Context {
    /// `ibv_alloc_pd`: allocates a protection domain.
    ///
    /// # Errors
    /// [`Error::Verb`] with `ibv_alloc_pd` and its errno (e.g. `ENOMEM`).
    ///
    /// See ibv_alloc_pd(3).
    #[doc(alias = "ibv_alloc_pd")]
    pub fn alloc_pd(&self) -> Result<Pd> {
        // SAFETY: the context is open.
        let pd = unsafe { sys::ibv_alloc_pd(self.as_ptr()) };
        let pd =
            NonNull::new(pd).ok_or_else(|| Error::last_os(Verb::AllocPd, format!("device {}", self.inner.name)))?;
        Ok(Pd { inner: Arc::new(PdInner { pd, ctx: Arc::clone(&self.inner) }) })
    }
}

impl Pd {
    /// The context this PD belongs to.
    pub fn context(&self) -> Context {
        Context { inner: Arc::clone(&self.inner.ctx) }
    }

    /// The name of the device the PD was allocated on.
    pub(crate) fn device_name(&self) -> &str {
        &self.inner.ctx.name
    }

    /// The context the PD was allocated in.
    pub(crate) fn device(&self) -> &crate::device::ContextInner {
        &self.inner.ctx
    }

    /// The context the PD was allocated in.
    pub(crate) fn context_ptr(&self) -> *mut sys::ibv_context {
        self.inner.ctx.ctx.as_ptr()
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.inner.pd.as_ptr()
    }
}
