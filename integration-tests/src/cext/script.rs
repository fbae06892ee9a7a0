//! The scenario's scripts: the operations ([`Op`]), what a run reports ([`Outcome`]) and
//! the standard script. A leaf: both sides (`host.rs` here, `cext/driver.py` over JSON)
//! read them.

use std::fmt;

/// One step of a scenario. Ids name objects; the driver holds a reference to every
/// object it created and has not dropped, and only uses those.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A new `cext.Container`.
    Container(i64),
    /// A new `cext.Leaf` owning `size` bytes.
    Leaf(i64, i64),
    /// A new host (managed) object with four reference slots.
    Host(i64),
    /// Container `c` appends object `x`.
    Append(i64, i64),
    /// Host `h` stores object `x` in slot `k`.
    Set(i64, usize, i64),
    /// Host `h` clears slot `k`.
    Unset(i64, usize),
    /// Container `c` drops its references.
    Clear(i64),
    /// Container `c` removes its last item (the reference is released).
    Pop(i64),
    /// The driver releases its reference to `id`.
    Drop(i64),
    /// A full collection; a checkpoint.
    Collect,
}

/// Host slots.
pub const HOST_SLOTS: usize = 4;

impl Op {
    /// The op as the JSON array `driver.py` reads.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match *self {
            Op::Container(id) => json!(["container", id]),
            Op::Leaf(id, size) => json!(["leaf", id, size]),
            Op::Host(id) => json!(["host", id]),
            Op::Append(c, x) => json!(["append", c, x]),
            Op::Set(h, k, x) => json!(["set", h, k, x]),
            Op::Unset(h, k) => json!(["unset", h, k]),
            Op::Clear(c) => json!(["clear", c]),
            Op::Pop(c) => json!(["pop", c]),
            Op::Drop(id) => json!(["drop", id]),
            Op::Collect => json!(["collect"]),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Container(id) => write!(f, "container {id}"),
            Op::Leaf(id, size) => write!(f, "leaf {id} ({size} bytes)"),
            Op::Host(id) => write!(f, "host {id}"),
            Op::Append(c, x) => write!(f, "{c}.append({x})"),
            Op::Set(h, k, x) => write!(f, "{h}.slot{k} = {x}"),
            Op::Unset(h, k) => write!(f, "{h}.slot{k} = None"),
            Op::Clear(c) => write!(f, "{c}.clear()"),
            Op::Pop(c) => write!(f, "{c}.pop()"),
            Op::Drop(id) => write!(f, "drop {id}"),
            Op::Collect => write!(f, "collect"),
        }
    }
}

/// What a run reports: for each `Collect` (and a final one after everything was
/// released), the sorted ids freed since the previous checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Freed ids per checkpoint.
    pub checkpoints: Vec<Vec<i64>>,
    /// Extension objects still alive at the end (0 expected).
    pub live_at_end: i64,
}

impl Outcome {
    pub(crate) fn from_json(v: &serde_json::Value) -> Option<Outcome> {
        let cps = v.get("checkpoints")?.as_array()?;
        let checkpoints = cps
            .iter()
            .map(|c| {
                c.as_array()
                    .map(|a| a.iter().filter_map(|x| x.as_i64()).collect())
            })
            .collect::<Option<Vec<Vec<i64>>>>()?;
        Some(Outcome {
            checkpoints,
            live_at_end: v.get("live")?.as_i64()?,
        })
    }
}

/// The scenario's own script: leaves with buffers, a native cycle, host objects in
/// cycles through containers (crossing the boundary once and twice), a cycle through a
/// host the driver still holds, a popped item, and a container emptied.
pub fn standard_script() -> Vec<Op> {
    use Op::*;
    vec![
        // 1. A container holding two leaves; dropping it frees all three by refcount.
        Container(1),
        Leaf(2, 4096),
        Leaf(3, 100_000),
        Append(1, 2),
        Append(1, 3),
        Drop(2),
        Drop(3),
        Drop(1),
        Collect,
        // 2. A native cycle of three containers, one holding a leaf: only the cycle
        //    collector frees it.
        Container(10),
        Container(11),
        Container(12),
        Leaf(13, 1 << 20),
        Append(10, 11),
        Append(11, 12),
        Append(12, 10),
        Append(12, 13),
        Drop(13),
        Drop(10),
        Drop(11),
        Drop(12),
        Collect,
        // 3. Host 20 -> container 21 -> host 20: one crossing each way.
        Host(20),
        Container(21),
        Set(20, 0, 21),
        Append(21, 20),
        Drop(21),
        Collect, // still held by the driver: nothing freed
        Drop(20),
        Collect,
        // 4. Two hosts and two containers in one ring: 30 -> 31 -> 32 -> 33 -> 30,
        //    plus a leaf hanging off 31 and a host hanging off 33.
        Host(30),
        Container(31),
        Host(32),
        Container(33),
        Leaf(34, 65_536),
        Host(35),
        Set(30, 0, 31),
        Append(31, 32),
        Append(31, 34),
        Set(32, 1, 33),
        Append(33, 30),
        Append(33, 35),
        Drop(31),
        Drop(32),
        Drop(33),
        Drop(34),
        Drop(35),
        Collect, // 30 is held: the ring stays
        Unset(30, 0),
        Collect, // the ring is broken at 30 -> 31; 31..35 are garbage
        Drop(30),
        Collect,
        // 5. A container popping its only item (a host) and a cleared container.
        Container(40),
        Host(41),
        Append(40, 41),
        Drop(41),
        Pop(40),
        Container(42),
        Host(43),
        Append(42, 43),
        Append(42, 42),
        Append(42, 40),
        Drop(43),
        Clear(42),
        Collect,
        Drop(40),
        Drop(42),
        Collect,
    ]
}
