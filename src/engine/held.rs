//! Entry counts of what the tasks hold in memory between commits, published as
//! `tidemark_task_entries{kind}` (SPEC §5: memory is bounded by retention, and this is how
//! an operator sees which part of the heap a growing RSS is):
//!
//! | kind | held by | bounded by |
//! |---|---|---|
//! | `dashboard_windows` | orders tasks: open dashboard windows per store and currency | window retention |
//! | `provisional_days` | orders tasks: open provisional days per store and currency | the days not closed yet |
//! | `sku_states` | SKU tasks: SKUs with state | the SKUs seen within retention |
//! | `sku_lines` | SKU tasks: line sums per event-time millisecond since each SKU's snapshot | window retention |
//! | `sku_windows` | SKU tasks: units per window for the velocity baseline | the rules' baseline reach |
//! | `sku_loaded` | SKU tasks: SKUs whose rows were read from the store | the SKUs seen since the task started |
//! | `merge_buffer` | SKU tasks: repartition records waiting for every upstream's progress | the slowest upstream |
//! | `combine_keys` | combine tasks: one sum per aggregate key | window retention |

use std::collections::BTreeMap;

/// Counts by kind, summed over tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held(BTreeMap<&'static str, usize>);

impl Held {
    pub fn add(&mut self, kind: &'static str, n: usize) {
        *self.0.entry(kind).or_default() += n;
    }

    pub fn counts(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }
}
