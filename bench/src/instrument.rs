//! A copy of a module that shows what the host cannot: its linear memory size and how often it
//! calls each hostcall, from which callback.
//!
//! The wasmtime host (host-tests) keeps its stores to itself and counts fuel per export only, and
//! the bench must not change it. So the bench changes the guest instead: every import gets a
//! wrapper that bumps an `i64` global and then calls it, every call to an import is pointed at
//! its wrapper, and small exports read the counters and `memory.size`. Each `proxy_on_*` export
//! is pointed at a wrapper too, which names the callback running in a global while it runs, so
//! an import's calls are counted per callback (a count per import and callback, picked by a
//! `br_table`). The guest's own functions keep their indices and their instructions, so the copy
//! behaves as the original; only its fuel grows, by a few instructions per hostcall and
//! callback, which is why fuel is measured on the original.

use crate::callbacks::CALLBACK_PREFIX;
use crate::rewrite::{self, Additions, Outline};
use anyhow::{Context, Result};
use std::borrow::Cow;
use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection,
    GlobalSection, GlobalType, Instruction, TypeSection, ValType,
};

/// The export that answers the size of memory 0 in 64 KiB pages.
pub const MEMORY_PAGES: &str = "upcheck_bench_memory_pages";

/// The export that answers how often the guest called `import` (`module.name`) while `callback`
/// (an export, e.g. `proxy_on_request_headers`) ran; `None` counts the calls outside any
/// `proxy_on_*` export.
pub fn counter_export(import: &str, callback: Option<&str>) -> String {
    format!(
        "upcheck_bench_calls:{import}@{}",
        callback.unwrap_or_default()
    )
}

/// An instrumented module and what it counts.
pub struct Instrumented {
    /// The module, with the exports [`MEMORY_PAGES`] and [`counter_export`] of each import and
    /// callback.
    pub wasm: Vec<u8>,
    /// The imported functions, `module.name`, in import order.
    pub imports: Vec<String>,
    /// The `proxy_on_*` exports, whose calls are counted apart.
    pub callbacks: Vec<String>,
}

/// An imported function.
struct Import {
    /// `module.name`.
    name: String,
    /// Its type index.
    ty: u32,
    /// How many parameters it takes.
    params: u32,
}

/// A `proxy_on_*` export, whose hostcalls are counted apart.
struct Callback {
    /// Its export name.
    name: String,
    /// The function it exports.
    function: u32,
    /// That function's type index.
    ty: u32,
    /// How many parameters it takes.
    params: u32,
}

/// Where the additions go, after what the module has ([`Outline`]).
struct Layout {
    /// Imported functions, in import order.
    imports: Vec<Import>,
    /// The callbacks, in export order; callback `k` is counted in slot `k + 1` (slot 0: no
    /// callback running).
    callbacks: Vec<Callback>,
    /// Types defined (every type of every rec group).
    types: u32,
    /// Functions defined in the module.
    functions: u32,
    /// Globals, imported and defined.
    globals: u32,
}

impl Layout {
    fn read(wasm: &[u8]) -> Result<Layout> {
        let outline = Outline::read(wasm)?;
        let imports = outline
            .imports
            .iter()
            .map(|(name, ty)| {
                Ok(Import {
                    name: name.clone(),
                    ty: *ty,
                    params: outline.params_of(*ty)?,
                })
            })
            .collect::<Result<_>>()?;
        let mut callbacks = Vec::new();
        for (name, function) in &outline.exports {
            // An import exported again has no body here to count it by.
            if !name.starts_with(CALLBACK_PREFIX) || *function < outline.imported() {
                continue;
            }
            let ty = outline
                .type_of(*function)
                .context("an export of an unknown function")?;
            callbacks.push(Callback {
                name: name.clone(),
                function: *function,
                ty,
                params: outline.params_of(ty)?,
            });
        }
        Ok(Layout {
            imports,
            callbacks,
            types: outline.types(),
            functions: outline.functions(),
            globals: outline.globals,
        })
    }

    fn imports(&self) -> u32 {
        self.imports.len() as u32
    }

    /// Counting slots per import: one per callback, and slot 0 for none.
    fn slots(&self) -> u32 {
        self.callbacks.len() as u32 + 1
    }

    /// The wrapper of import `i`: after every function the module defines.
    fn import_wrapper(&self, i: u32) -> u32 {
        self.imports() + self.functions + i
    }

    /// The wrapper of callback `k`: after the imports' wrappers.
    fn callback_wrapper(&self, k: u32) -> u32 {
        self.import_wrapper(self.imports()) + k
    }

    /// The first counter reader: after the callbacks' wrappers; one per import and slot.
    fn readers(&self) -> u32 {
        self.callback_wrapper(self.callbacks.len() as u32)
    }

    /// The global naming the slot of the callback running: after every global.
    fn running(&self) -> u32 {
        self.globals
    }

    /// The counter of import `i` in `slot`: after [`Layout::running`].
    fn counter(&self, i: u32, slot: u32) -> u32 {
        self.globals + 1 + i * self.slots() + slot
    }

    /// Type `() -> i64` of the counter readers; `() -> i32` of the memory reader is the next one.
    fn reader_type(&self) -> u32 {
        self.types
    }
}

/// The additions: a wrapper per import and per callback, a counter per import and slot, and
/// their readers.
impl Additions for Layout {
    /// Every call to (or reference of) an import goes to its wrapper instead.
    fn function_index(&self, index: u32) -> u32 {
        if index < self.imports() {
            self.import_wrapper(index)
        } else {
            index
        }
    }

    /// A callback is exported as its wrapper, which names it while it runs.
    fn wrapper(&self, name: &str) -> Option<u32> {
        (0..)
            .zip(&self.callbacks)
            .find(|(_, c)| c.name == name)
            .map(|(k, _)| self.callback_wrapper(k))
    }

    fn types(&self, types: &mut TypeSection) {
        types.ty().function([], [ValType::I64]);
        types.ty().function([], [ValType::I32]);
    }

    fn functions(&self, functions: &mut FunctionSection) {
        for import in &self.imports {
            functions.function(import.ty);
        }
        for callback in &self.callbacks {
            functions.function(callback.ty);
        }
        for _ in 0..self.imports() * self.slots() {
            functions.function(self.reader_type());
        }
        functions.function(self.reader_type() + 1);
    }

    fn globals(&self, globals: &mut GlobalSection) {
        let running = GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        };
        globals.global(running, &ConstExpr::i32_const(0));
        let counter = GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        for _ in 0..self.imports() * self.slots() {
            globals.global(counter, &ConstExpr::i64_const(0));
        }
    }

    fn exports(&self, exports: &mut ExportSection) {
        let readers = self.readers();
        let callbacks: Vec<Option<&str>> = std::iter::once(None)
            .chain(self.callbacks.iter().map(|c| Some(c.name.as_str())))
            .collect();
        for (i, import) in (0..).zip(&self.imports) {
            for (slot, callback) in (0..).zip(&callbacks) {
                let reader = readers + i * self.slots() + slot;
                let name = counter_export(&import.name, *callback);
                exports.export(&name, ExportKind::Func, reader);
            }
        }
        let memory_reader = readers + self.imports() * self.slots();
        exports.export(MEMORY_PAGES, ExportKind::Func, memory_reader);
    }

    fn code(&self, code: &mut CodeSection) {
        self.wrappers(code);
        self.callback_wrappers(code);
        for i in 0..self.imports() {
            for slot in 0..self.slots() {
                let mut reader = Function::new([]);
                reader.instruction(&Instruction::GlobalGet(self.counter(i, slot)));
                reader.instruction(&Instruction::End);
                code.function(&reader);
            }
        }
        let mut memory = Function::new([]);
        memory.instruction(&Instruction::MemorySize(0));
        memory.instruction(&Instruction::End);
        code.function(&memory);
    }
}

impl Layout {
    /// Wrapper `i`: bump import `i`'s counter of the slot running, pass every parameter on to
    /// import `i`. The slot picks the counter through a `br_table` over one block per slot: the
    /// table leaves block `slot`, after which that slot's counter is bumped.
    fn wrappers(&self, code: &mut CodeSection) {
        let slots = self.slots();
        for (i, import) in (0..).zip(&self.imports) {
            let mut wrapper = Function::new([]);
            wrapper.instruction(&Instruction::Block(BlockType::Empty)); // done
            for _ in 0..slots {
                wrapper.instruction(&Instruction::Block(BlockType::Empty));
            }
            wrapper.instruction(&Instruction::GlobalGet(self.running()));
            let targets: Vec<u32> = (0..slots).collect();
            wrapper.instruction(&Instruction::BrTable(Cow::Owned(targets), 0));
            for slot in 0..slots {
                // The end of the block the table leaves for `slot`; `done` is `slots - slot`
                // blocks out from here.
                wrapper.instruction(&Instruction::End);
                let counter = self.counter(i, slot);
                wrapper.instruction(&Instruction::GlobalGet(counter));
                wrapper.instruction(&Instruction::I64Const(1));
                wrapper.instruction(&Instruction::I64Add);
                wrapper.instruction(&Instruction::GlobalSet(counter));
                wrapper.instruction(&Instruction::Br(slots - 1 - slot));
            }
            wrapper.instruction(&Instruction::End); // done
            for param in 0..import.params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(i));
            wrapper.instruction(&Instruction::End);
            code.function(&wrapper);
        }
    }

    /// Callback wrapper `k`: name slot `k + 1` as running, call the callback with every
    /// parameter, then name again what ran before (a callback may run inside a hostcall).
    fn callback_wrappers(&self, code: &mut CodeSection) {
        for (k, callback) in (1..).zip(&self.callbacks) {
            let before = callback.params;
            let mut wrapper = Function::new([(1, ValType::I32)]);
            wrapper.instruction(&Instruction::GlobalGet(self.running()));
            wrapper.instruction(&Instruction::LocalSet(before));
            wrapper.instruction(&Instruction::I32Const(k));
            wrapper.instruction(&Instruction::GlobalSet(self.running()));
            for param in 0..callback.params {
                wrapper.instruction(&Instruction::LocalGet(param));
            }
            wrapper.instruction(&Instruction::Call(callback.function));
            wrapper.instruction(&Instruction::LocalGet(before));
            wrapper.instruction(&Instruction::GlobalSet(self.running()));
            wrapper.instruction(&Instruction::End);
            code.function(&wrapper);
        }
    }
}

/// Instruments `wasm` (see the module docs).
pub fn instrument(wasm: &[u8]) -> Result<Instrumented> {
    let layout = Layout::read(wasm)?;
    Ok(Instrumented {
        wasm: rewrite::copy(wasm, &layout)?,
        imports: layout.imports.into_iter().map(|i| i.name).collect(),
        callbacks: layout.callbacks.into_iter().map(|c| c.name).collect(),
    })
}
