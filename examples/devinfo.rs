//! `devinfo`: like `ibv_devinfo`, listing every RDMA device with the attributes this library
//! types.
//!
//! Usage: `cargo run --example devinfo [-- DEVICE]`

use typed_verbs::prelude::*;

fn main() -> typed_verbs::Result<()> {
    let only = std::env::args().nth(1);
    let devs = devices()?;
    if devs.is_empty() {
        println!("No RDMA devices found");
        return Ok(());
    }
    for d in devs.iter().filter(|d| only.as_deref().is_none_or(|n| n == d.name)) {
        let ctx = Context::open(&d.name)?;
        let attr = ctx.query_device()?;
        println!("hca_id: {}", d.name);
        println!("\tnode_guid:\t\t{:016x}", d.guid);
        println!("\tfw_ver:\t\t\t{}", attr.fw_ver());
        println!("\tmax_qp:\t\t\t{}", attr.max_qp());
        println!("\tmax_qp_wr:\t\t{}", attr.max_qp_wr());
        println!("\tmax_sge:\t\t{}", attr.max_sge());
        println!("\tmax_cqe:\t\t{}", attr.max_cqe());
        println!("\tmax_mr:\t\t\t{}", attr.max_mr());
        println!("\tmax_mw:\t\t\t{}", attr.max_mw());
        println!("\tmax_qp_rd_atom:\t\t{}", attr.max_qp_rd_atom());
        println!("\tatomic_cap:\t\t{}", atomic_name(attr.atomic_cap()));
        for port in 1..=attr.phys_port_cnt() {
            let p = ctx.query_port(port)?;
            println!("\tport:\t{port}");
            println!("\t\tstate:\t\t{:?}", p.state());
            println!("\t\tactive_mtu:\t{}", p.active_mtu().map_or(0, |m| m.bytes()));
            println!("\t\tmax_mtu:\t{}", p.max_mtu().map_or(0, |m| m.bytes()));
            println!("\t\tlink_layer:\t{:?}", p.link_layer());
            println!("\t\tlid:\t\t{}", p.lid());
            for i in 0..p.gid_tbl_len() {
                match ctx.query_gid(port, i) {
                    Ok(g) if !g.is_zero() => println!("\t\tGID[{i:3}]:\t{g}"),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

fn atomic_name(cap: u32) -> &'static str {
    match cap {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "unknown",
    }
}
