//! The orders in which glibc walks link maps, over this loader's images: a library's
//! local search list (`append_closure`, glibc's `l_searchlist`: the library, then its
//! `DT_NEEDED` closure breadth-first) and `_dl_sort_maps` (`sort_maps`), which gives
//! the order of initialisers (`init_order`) and of fini functions (`fini_order`).

use crate::image::{Dep, Image, ScopeItem};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Appends `root` and its `DT_NEEDED` closure, breadth-first, to `out`, skipping the
/// libraries already in it: glibc's local search list (`l_searchlist`) of `root`.
pub(crate) fn append_closure(out: &mut Vec<ScopeItem>, root: &Arc<Image>) {
    let root_item = ScopeItem::Custom(root.clone());
    if out.iter().any(|x| x.same(&root_item)) {
        return;
    }
    let first = out.len();
    out.push(root_item);
    let mut next = first;
    while next < out.len() {
        let ScopeItem::Custom(i) = &out[next] else {
            next += 1;
            continue;
        };
        let i = i.clone();
        next += 1;
        for d in i.deps.get().map(|v| v.as_slice()).unwrap_or(&[]) {
            let item = match d {
                Dep::Custom(w) => match w.upgrade() {
                    Some(c) => ScopeItem::Custom(c),
                    None => continue,
                },
                Dep::System(s) => ScopeItem::System(s.clone()),
            };
            if !out.iter().any(|x| x.same(&item)) {
                out.push(item);
            }
        }
    }
}

/// glibc's sort of link maps (`elf/dl-sort-maps.c`, its default depth-first
/// algorithm, `glibc.rtld.dynamic_sort=2`), over `maps` in load order: each object is
/// visited from the last loaded to the first, and a visit first visits the object's
/// dependencies (`DT_NEEDED` order) and, with `reldeps`, the objects it bound symbols of
/// outside its own dependency closure (glibc's `l_reldeps`, newest first); objects
/// outside `maps` are not entered. The result lists every object before its
/// dependencies (the reverse of the order in which visits completed). The second value
/// says whether a relocation dependency was followed.
fn sort_maps(maps: &[Arc<Image>], reldeps: bool) -> (Vec<Arc<Image>>, bool) {
    struct Dfs<'a> {
        index: HashMap<*const Image, usize>,
        maps: &'a [Arc<Image>],
        seen: Vec<bool>,
        done: Vec<Arc<Image>>,
        reldeps: bool,
        saw_reldeps: bool,
    }
    impl Dfs<'_> {
        fn visit(&mut self, img: &Arc<Image>) {
            let Some(&k) = self.index.get(&Arc::as_ptr(img)) else {
                return;
            };
            if std::mem::replace(&mut self.seen[k], true) {
                return;
            }
            let deps: Vec<Arc<Image>> = img
                .deps
                .get()
                .map(|v| v.as_slice())
                .unwrap_or(&[])
                .iter()
                .filter_map(|d| match d {
                    Dep::Custom(w) => w.upgrade(),
                    Dep::System(_) => None,
                })
                .collect();
            for d in &deps {
                self.visit(d);
            }
            if self.reldeps {
                let bound: Vec<Arc<Image>> = img
                    .reldeps
                    .lock()
                    .iter()
                    .filter_map(Weak::upgrade)
                    .collect();
                if !bound.is_empty() {
                    let mut closure = Vec::new();
                    append_closure(&mut closure, img);
                    let outside: Vec<&Arc<Image>> = bound
                        .iter()
                        .filter(|b| {
                            !closure
                                .iter()
                                .any(|c| c.same(&ScopeItem::Custom((*b).clone())))
                        })
                        .collect();
                    if !outside.is_empty() {
                        self.saw_reldeps = true;
                    }
                    for b in outside.into_iter().rev() {
                        self.visit(b);
                    }
                }
            }
            self.done.push(self.maps[k].clone());
        }
    }
    let mut dfs = Dfs {
        index: maps
            .iter()
            .enumerate()
            .map(|(k, m)| (Arc::as_ptr(m), k))
            .collect(),
        maps,
        seen: vec![false; maps.len()],
        done: Vec::with_capacity(maps.len()),
        reldeps,
        saw_reldeps: false,
    };
    for img in maps.iter().rev() {
        dfs.visit(img);
    }
    dfs.done.reverse();
    (dfs.done, dfs.saw_reldeps)
}

/// The order in which glibc runs the initialisers of a load's new objects (`new` in
/// breadth-first load order): the end of [`sort_maps`]' list first (`_dl_init`). So
/// dependencies are initialised first, and objects with no dependency between them in
/// the reverse of their load order (a library needing `b` then `c`, unrelated: `c`,
/// `b`, then the library). Only new objects are ordered: those loaded before are
/// initialised already.
pub(crate) fn init_order(new: &[Arc<Image>]) -> Vec<Arc<Image>> {
    let (mut order, _) = sort_maps(new, false);
    order.reverse();
    order
}

/// The order in which glibc runs the fini functions of `images` (in any order; sorted
/// here by load order) at `dlclose` and at exit (`_dl_close_worker`, `_dl_fini`): the
/// front of [`sort_maps`]' list first, relocation dependencies included; when one was
/// followed, sorted again by `DT_NEEDED` alone from that order, so static dependencies
/// win over relocation ones. So an object goes before its dependencies, and objects
/// with no dependency between them in load order (glibc finalises two unrelated
/// `dlopen`ed libraries in the order they were loaded).
pub(crate) fn fini_order(images: &[Arc<Image>]) -> Vec<Arc<Image>> {
    let mut maps = images.to_vec();
    maps.sort_by_key(|i| i.id);
    let (order, saw_reldeps) = sort_maps(&maps, true);
    if saw_reldeps {
        sort_maps(&order, false).0
    } else {
        order
    }
}
