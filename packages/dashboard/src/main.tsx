import { render } from 'preact';
import './style.css';
import { App } from './app.js';

render(<App />, document.getElementById('app')!);
