pub mod bindings;
