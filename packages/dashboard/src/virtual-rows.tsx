import type { ComponentChild } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

/**
 * A scrolling list that draws only the rows in view (and a few around them): thousands of rows
 * cost what a screenful does. Rows are `rowHeight` pixels high.
 */
export function VirtualRows(p: { count: number; rowHeight: number; render: (i: number) => ComponentChild }) {
  const box = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(600);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const measure = (): void => setHeight(el.clientHeight);
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const overscan = 10;
  const first = Math.max(0, Math.floor(top / p.rowHeight) - overscan);
  const last = Math.min(p.count, Math.ceil((top + height) / p.rowHeight) + overscan);
  const drawn: ComponentChild[] = [];
  for (let i = first; i < last; i++) drawn.push(p.render(i));
  return (
    <div class="virtual" ref={box} onScroll={(e) => setTop(e.currentTarget.scrollTop)}>
      <div style={{ height: `${p.count * p.rowHeight}px`, position: 'relative' }}>
        <div style={{ position: 'absolute', top: `${first * p.rowHeight}px`, left: 0, right: 0 }}>{drawn}</div>
      </div>
    </div>
  );
}
